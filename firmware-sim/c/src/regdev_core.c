/* regdev's wire protocol, device side (docs/protocol.md): framing, checks, frame kinds.
 *
 * Rules of this file:
 * - No I/O, no allocation, no state outside the regdev_core_t the caller passes.
 * - Every frame kind, request or reply, is one row of KINDS: its letter, the shape of its
 *   fields, and the function that answers it (none for a reply: a device drops replies).
 *   A new frame is a new row (and a new shape if its fields look like no other).
 * - The checks run in the order of the Python codec (src/regdev/devices/_protocol.py, decode), so a
 *   broken frame gets the same error code and sequence number as there.
 */
#define REGDEV_MAP_TABLE /* regmap.h's table, for this file only */
#include "regdev_core.h"

#include "regdev_rom.h"
#include "regmap.h"

/* The columns of a register's row in regmap.h's regdev_map. */
enum { COL_ADDR, COL_RESET, COL_WRITABLE, COL_READABLE, COL_RESERVED, COL_WOCLR, COL_RCLR };
#define COLUMN(index, column) REGDEV_ROM_BYTE(&regdev_map[column][index])
/* What find() returns for an address with no register. */
#define NO_REGISTER 0xFFu
typedef char regdev_map_fits[(REGDEV_REGISTER_COUNT < NO_REGISTER) ? 1 : -1];

#define ID_TEXT "regdev C/" REGDEV_PLATFORM " " REGDEV_MAP_NAME
/* The description alone is a whole identify text, 1..48 bytes (docs/protocol.md); a longer
 * one fails to compile. */
typedef char regdev_identity_fits[(sizeof(ID_TEXT) - 1u <= REGDEV_MAX_TEXT) ? 1 : -1];
const char regdev_identity[] REGDEV_ROM = ID_TEXT;
/* The answer to I 01, "map=<digest> <map name>" (docs/protocol.md, "Which map the device
 * serves"), from gen_regmap.py; at most 48 bytes. */
typedef char regdev_map_text_fits[(sizeof(REGDEV_MAP_TEXT) - 1u <= REGDEV_MAX_TEXT) ? 1 : -1];
static const char MAP_TEXT[] REGDEV_ROM = REGDEV_MAP_TEXT;
static const char TEXT_ID[] REGDEV_ROM = " id=";
static const char TEXT_EPOCH[] REGDEV_ROM = " epoch=";
/* The bytes of " id=" and " epoch=", and of the epoch BBBBRRRR. */
#define EXTENSION_BYTES 11u
#define EPOCH_DIGITS 8u

static const char CODE_ADDR[] REGDEV_ROM = "ADDR";
static const char CODE_DATA[] REGDEV_ROM = "DATA";
static const char CODE_CKSUM[] REGDEV_ROM = "CKSUM";
static const char CODE_SYNTAX[] REGDEV_ROM = "SYNTAX";
#ifdef REGDEV_BUS_I2C
/* The bus errors of a bridge, by REGDEV_BUS_* (docs/firmware.md, "Bus errors"). */
static const char CODE_NOACK[] REGDEV_ROM = "NOACK";
static const char CODE_NACK[] REGDEV_ROM = "NACK";
static const char CODE_ARBLOST[] REGDEV_ROM = "ARBLOST";
static const char CODE_BUSLOW[] REGDEV_ROM = "BUSLOW";
static const char CODE_STRETCH[] REGDEV_ROM = "STRETCH";
static const char *const BUS_CODES[] = {CODE_SYNTAX, CODE_NOACK, CODE_NACK, CODE_ARBLOST,
                                        CODE_BUSLOW, CODE_STRETCH};
#elif defined(REGDEV_BUS_SPI)
/* What an SPI bridge can tell, by REGDEV_BUS_* (docs/firmware.md, "SPI errors"). */
static const char CODE_MISOHI[] REGDEV_ROM = "MISOHI";
static const char CODE_MISOLO[] REGDEV_ROM = "MISOLO";
static const char CODE_VERIFY[] REGDEV_ROM = "VERIFY";
static const char *const BUS_CODES[] = {CODE_SYNTAX, CODE_MISOHI, CODE_MISOLO, CODE_VERIFY};
#if REGDEV_SPI_VERIFY
#define VERIFYING 1
#endif
#endif

/* --- the shapes of fields ------------------------------------------------------------- */

enum {
    SHAPE_NONE,   /* no fields: the frame is "SS L" exactly */
    SHAPE_HEX,    /* min..max bytes as hex pairs, one space apart: "03 FF" */
    SHAPE_BLOCK,  /* an address, a space, then min..max bytes as hex pairs, no spaces */
    SHAPE_DUMP,   /* 16 bytes as hex pairs, no spaces, after an address not 00 and a space
                     or not: the dump's "0011..FF" or "10 0011..FF" */
    SHAPE_TEXT,   /* min..max printable ASCII bytes other than '$' and '*' */
    SHAPE_CODE    /* min..max letters A-Z (an error code) */
};

/* Most hex bytes a request carries (P: an address and 16 values). */
#define MAX_ARGS (1u + REGDEV_MAX_BLOCK)

/* Writes a reply's letter and fields at `out`, from the request's hex bytes (`args`, `count`
 * of them: for a block, the values after the address); returns how many bytes it wrote. */
typedef uint8_t (*handler_t)(regdev_core_t *core, uint8_t *out, const uint8_t *args,
                             uint8_t count);

typedef struct {
    uint8_t letter;
    uint8_t shape;
    uint8_t min, max; /* counts of bytes (hex shapes, a block's values) or characters (text,
                         code); min 0: the fields may be left out */
    handler_t handle; /* 0 for a reply frame: dropped without an answer */
} kind_t;

#define HANDLER(name) \
    static uint8_t name(regdev_core_t *core, uint8_t *out, const uint8_t *args, uint8_t count)
HANDLER(do_identify);
HANDLER(do_register);
HANDLER(do_reset);
HANDLER(do_dump);
HANDLER(do_block);

/* Every frame of docs/protocol.md, "The frames". */
static const kind_t KINDS[] REGDEV_ROM = {
    {'I', SHAPE_HEX, 0, 1, do_identify},              /* I, or I 01 (the map) */
    {'R', SHAPE_HEX, 1, 1, do_register},              /* R AA */
    {'W', SHAPE_HEX, 2, 2, do_register},              /* W AA DD */
    {'Z', SHAPE_NONE, 0, 0, do_reset},
    {'D', SHAPE_HEX, 0, 1, do_dump},                  /* D, or D AA */
    {'G', SHAPE_HEX, 2, 2, do_block},                 /* G AA NN */
    {'P', SHAPE_BLOCK, 1, REGDEV_MAX_BLOCK, do_block}, /* P AA DD... */
    {'M', SHAPE_HEX, 3, 3, do_register},              /* M AA MM DD */
    {'i', SHAPE_TEXT, 1, 48, 0},
    {'r', SHAPE_HEX, 2, 2, 0},
    {'w', SHAPE_HEX, 2, 2, 0},
    {'z', SHAPE_NONE, 0, 0, 0},
    {'d', SHAPE_DUMP, 16, 16, 0},
    {'g', SHAPE_BLOCK, 1, REGDEV_MAX_BLOCK, 0},
    {'p', SHAPE_BLOCK, 1, REGDEV_MAX_BLOCK, 0},
    {'m', SHAPE_HEX, 2, 2, 0},
    {'e', SHAPE_CODE, 1, 8, 0},
};
#define KIND_COUNT ((uint8_t)(sizeof(KINDS) / sizeof(KINDS[0])))

/* --- bytes ---------------------------------------------------------------------------- */

/* CRC-8/SMBUS: polynomial 0x07, initial 0, no reflection, no final XOR (check value 0xF4). */
static uint8_t crc8(const uint8_t *p, uint8_t n)
{
    uint8_t crc = 0;
    while (n--) {
        uint8_t bit;
        crc ^= *p++;
        for (bit = 0; bit < 8u; bit++)
            crc = (crc & 0x80u) ? (uint8_t)((crc << 1) ^ 0x07) : (uint8_t)(crc << 1);
    }
    return crc;
}

/* The value of one upper-case hex digit, or 0xFF. */
static uint8_t nibble(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return (uint8_t)(c - '0');
    if (c >= 'A' && c <= 'F')
        return (uint8_t)(c - 'A' + 10);
    return 0xFFu;
}

/* Two upper-case hex digits as a byte: 0..255, or -1. */
static int16_t hex2(const uint8_t *p)
{
    uint8_t hi = nibble(p[0]), lo = nibble(p[1]);
    return (hi | lo) > 15u ? -1 : (int16_t)((hi << 4) | lo);
}

static uint8_t *put_hex(uint8_t *out, uint8_t value)
{
    static const char digits[] REGDEV_ROM = "0123456789ABCDEF";
    out[0] = REGDEV_ROM_BYTE(&digits[value >> 4]);
    out[1] = REGDEV_ROM_BYTE(&digits[value & 15u]);
    return out + 2;
}

/* Copy a NUL-terminated ROM string; returns the end. */
static uint8_t *put_text(uint8_t *out, const char *text)
{
    uint8_t c;
    while ((c = REGDEV_ROM_BYTE(text++)) != 0)
        *out++ = c;
    return out;
}

/* --- replies -------------------------------------------------------------------------- */

/* Frame core->reply: '$', the sequence number and a space are put here, the letter and fields
 * are at reply[4..4+body-1]; appends '*', the CRC-8 and LF. Returns the frame's length. */
static uint8_t finish(regdev_core_t *core, uint8_t seq, uint8_t body)
{
    uint8_t *end;
    core->reply[0] = '$';
    put_hex(core->reply + 1, seq);
    core->reply[3] = ' ';
    end = core->reply + 4 + body;
    *end++ = '*';
    end = put_hex(end, crc8(core->reply + 1, (uint8_t)(3u + body)));
    *end++ = '\n';
    return (uint8_t)(end - core->reply);
}

static uint8_t put_error(uint8_t *out, const char *code)
{
    out[0] = 'e';
    out[1] = ' ';
    return (uint8_t)(put_text(out + 2, code) - out);
}

static uint8_t error_reply(regdev_core_t *core, int16_t seq, const char *code)
{
    return finish(core, seq < 0 ? 0u : (uint8_t)seq, put_error(core->reply + 4, code));
}

/* r/w/m AA DD */
static uint8_t put_register(uint8_t *out, uint8_t letter, uint8_t addr, uint8_t value)
{
    out[0] = letter;
    out[1] = ' ';
    put_hex(out + 2, addr);
    out[4] = ' ';
    put_hex(out + 5, value);
    return 7;
}

/* --- the register file (regmap.h), as src/regdev/devices/_regmap.py says ---------------- */

/* The index of the register at `addr` (0..255; more is no register), or NO_REGISTER. */
static uint8_t find(uint16_t addr)
{
    uint8_t index;
    for (index = 0; index < REGDEV_REGISTER_COUNT; index++)
        if (COLUMN(index, COL_ADDR) == addr)
            return index;
    return NO_REGISTER;
}

/* Whether the register refuses the bits `mask` of `data` (Register.refuse_write): it has no
 * writable bit, or a reserved bit would be set. */
static uint8_t refuses(uint8_t index, uint8_t data, uint8_t mask)
{
    return !COLUMN(index, COL_WRITABLE) || (data & mask & COLUMN(index, COL_RESERVED));
}

#ifndef REGDEV_BUS
/* What a dump shows of register `index`: its readable bits, without side effects. */
static uint8_t shown(const regdev_core_t *core, uint8_t index)
{
    return (uint8_t)(core->regs[index] & COLUMN(index, COL_READABLE));
}

/* A read (Register.read_effect): the readable bits, then the clear-on-read bits cleared. */
static uint8_t read_register(regdev_core_t *core, uint8_t index)
{
    uint8_t value = shown(core, index);
    core->regs[index] &= (uint8_t)~COLUMN(index, COL_RCLR);
    return value;
}

/* A write of the bits `mask` of `data` (Register.written): writable bits take the data,
 * write-1-to-clear bits clear where it has a 1, the others keep their value. Returns what
 * a read would show after, without clearing anything. */
static uint8_t write_register(regdev_core_t *core, uint8_t index, uint8_t data, uint8_t mask)
{
    uint8_t woclr = COLUMN(index, COL_WOCLR);
    uint8_t store = (uint8_t)(COLUMN(index, COL_WRITABLE) & ~woclr & mask);
    uint8_t old = core->regs[index];
    core->regs[index] = (uint8_t)(((old & ~store) | (data & store)) & ~(woclr & mask & data));
    return shown(core, index);
}

static void reset_registers(regdev_core_t *core)
{
    uint8_t index;
    for (index = 0; index < REGDEV_REGISTER_COUNT; index++)
        core->regs[index] = COLUMN(index, COL_RESET);
}
#endif

/* --- the requests ---------------------------------------------------------------------- */

/* i <description> id=<ID> epoch=<BBBBRRRR>, the description cut (and stripped of the spaces
 * the cut leaves at its end) to fit 48 bytes; without an id, the description alone. I 01:
 * i map=<digest> <name>, the map this image was built with; I 00 is spelt I. */
HANDLER(do_identify)
{
    const char *text = regdev_identity, *id = core->id;
    uint8_t *start = out + 2, *end = start, room = REGDEV_MAX_TEXT, c;
    out[0] = 'i';
    out[1] = ' ';
    if (count) {
        if (args[0] != 1u)
            return put_error(out, CODE_SYNTAX);
        return (uint8_t)(put_text(start, MAP_TEXT) - out);
    }
    if (*id) {
        room = (uint8_t)(REGDEV_MAX_TEXT - EXTENSION_BYTES - EPOCH_DIGITS);
        while (*id++)
            room--;
    }
    while (room-- && (c = REGDEV_ROM_BYTE(text++)) != 0)
        *end++ = c;
    while (end > start + 1 && end[-1] == ' ')
        end--;
    if (core->id[0]) {
        end = put_text(end, TEXT_ID);
        for (id = core->id; *id; id++)
            *end++ = (uint8_t)*id;
        end = put_text(end, TEXT_EPOCH);
        end = put_hex(end, (uint8_t)(core->starts >> 8));
        end = put_hex(end, (uint8_t)core->starts);
        end = put_hex(end, (uint8_t)(core->resets >> 8));
        end = put_hex(end, (uint8_t)core->resets);
    }
    return (uint8_t)(end - out);
}

#ifdef REGDEV_BUS
/* --- a bridge: the registers are the chip's, moved over the bus ------------------------ */

/* `e` and the code of a bus error (REGDEV_BUS_*). */
static uint8_t bus_error(uint8_t *out, uint8_t error)
{
    return put_error(out, BUS_CODES[error]);
}

/* The readable bits of `n` registers read from the chip, from the one at `index`. */
static void readable(uint8_t index, uint8_t *data, uint8_t n)
{
    while (n--) {
        *data = (uint8_t)(*data & COLUMN(index, COL_READABLE));
        data++;
        index++;
    }
}

/* After a write that read nothing back from the chip: on SPI, which has no acknowledgement,
 * the map's identity register read through the stuck-MISO check (avr/spi.c), so that a write
 * to a chip that is not there is MISOHI or MISOLO, never done; REGDEV_BUS_OK on I2C (the chip
 * acknowledged every byte) and on an SPI map without an identity register (nothing to tell
 * by). */
static uint8_t unread_checked(void)
{
#ifdef REGDEV_SPI_IDENTITY
    uint8_t id;
    return regdev_bus_read(REGDEV_SPI_IDENTITY, &id, 1);
#else
    return REGDEV_BUS_OK;
#endif
}

#ifdef VERIFYING
/* Whether register `index`, written `written`, read back `read` without the bits it should
 * store (writable, readable, not write-1-to-clear): the SPI chip did not take the write. */
static uint8_t lost(uint8_t index, uint8_t written, uint8_t read)
{
    return (uint8_t)((written ^ read) & COLUMN(index, COL_WRITABLE) &
                     COLUMN(index, COL_READABLE) & ~COLUMN(index, COL_WOCLR));
}
#endif

/* R AA, W AA DD and M AA MM DD, forwarded to the chip after the map's checks. A write's reply
 * is the register read back from the chip (its readable bits); a register with clear-on-read
 * bits is not read back (a read would clear them): its reply is what the write stored, once
 * unread_checked() finds the chip there. A masked write reads the register, sets the bits of
 * MM, writes it: one read-modify-write, between two frames (the host's next frame waits in the
 * receive ring meanwhile). */
HANDLER(do_register)
{
    static const char replies[] REGDEV_ROM = "rwm";
    uint8_t index = find(args[0]), mask = count == 3u ? args[1] : 0xFFu;
    uint8_t data = args[count - 1u], value, error;
    (void)core;
    if (index == NO_REGISTER)
        return put_error(out, CODE_ADDR);
    if (count > 1u) {
        uint8_t woclr = COLUMN(index, COL_WOCLR);
        if (refuses(index, data, mask))
            return put_error(out, CODE_DATA); /* refused, the bus not touched */
        if (mask != 0xFFu) {
            uint8_t store = (uint8_t)(COLUMN(index, COL_WRITABLE) & ~woclr & mask), old;
            if ((error = regdev_bus_read(args[0], &old, 1)) != 0)
                return bus_error(out, error);
            /* write-1-to-clear bits: a 1 only where MM and DD have one */
            data = (uint8_t)((((old & ~store) | (data & store)) & ~woclr) | (woclr & mask & data));
        }
        if ((error = regdev_bus_write(args[0], &data, 1)) != 0)
            return bus_error(out, error);
        if (COLUMN(index, COL_RCLR)) {
            value = (uint8_t)(data & COLUMN(index, COL_WRITABLE) & ~woclr);
            if ((error = unread_checked()) != 0)
                return bus_error(out, error);
        } else if ((error = regdev_bus_read(args[0], &value, 1)) != 0)
            return bus_error(out, error);
#ifdef VERIFYING
        else if (lost(index, data, value))
            return bus_error(out, REGDEV_BUS_VERIFY);
#endif
    } else if ((error = regdev_bus_read(args[0], &value, 1)) != 0) {
        return bus_error(out, error);
    }
    readable(index, &value, 1);
    return put_register(out, REGDEV_ROM_BYTE(&replies[count - 1u]), args[0], value);
}

/* Z: each register with writable bits written its reset value (write-1-to-clear bits 0), in
 * address order; the first bus error stops it and is the answer. */
HANDLER(do_reset)
{
    uint8_t index, error;
    (void)args;
    (void)count;
    for (index = 0; index < REGDEV_REGISTER_COUNT; index++) {
        uint8_t value = (uint8_t)(COLUMN(index, COL_RESET) & ~COLUMN(index, COL_WOCLR));
        if (COLUMN(index, COL_WRITABLE) &&
            (error = regdev_bus_write(COLUMN(index, COL_ADDR), &value, 1)) != 0)
            return bus_error(out, error);
#ifdef VERIFYING
        if (COLUMN(index, COL_WRITABLE) && !COLUMN(index, COL_RCLR)) {
            uint8_t read;
            if ((error = regdev_bus_read(COLUMN(index, COL_ADDR), &read, 1)) != 0)
                return bus_error(out, error);
            if (lost(index, value, read))
                return bus_error(out, REGDEV_BUS_VERIFY);
        }
#endif
    }
#ifndef VERIFYING
    if ((error = unread_checked()) != 0) /* nothing above was read back */
        return bus_error(out, error);
#endif
    if (++core->resets == 0)
        core->starts = regdev_core_next_start(core->starts);
    out[0] = 'z';
    return 1;
}
#else
/* R AA, W AA DD and M AA MM DD (one handler: the count of bytes tells them apart). A masked
 * write is one read-modify-write, between two frames; a write is one of mask FF. */
HANDLER(do_register)
{
    static const char replies[] REGDEV_ROM = "rwm";
    uint8_t index = find(args[0]), mask = count == 3u ? args[1] : 0xFFu;
    uint8_t data = args[count - 1u], value;
    if (index == NO_REGISTER)
        return put_error(out, CODE_ADDR);
    if (count == 1u) {
        value = read_register(core, index);
    } else {
        if (refuses(index, data, mask))
            return put_error(out, CODE_DATA); /* refused, not executed */
        value = write_register(core, index, data, mask);
    }
    return put_register(out, REGDEV_ROM_BYTE(&replies[count - 1u]), args[0], value);
}

HANDLER(do_reset)
{
    (void)args;
    (void)count;
    reset_registers(core);
    /* a new epoch: one more reset, or past FFFF resets, a new start count */
    if (++core->resets == 0)
        core->starts = regdev_core_next_start(core->starts);
    out[0] = 'z';
    return 1;
}
#endif

/* `letter`, a space, `addr` and a space: the head of a d AA, g or p reply. */
static uint8_t *put_head(uint8_t *out, uint8_t letter, uint8_t addr)
{
    out[0] = letter;
    out[1] = ' ';
    put_hex(out + 2, addr);
    out[4] = ' ';
    return out + 5;
}

#ifdef REGDEV_BUS
/* D, or D AA: the 16 addresses from AA, each register read from the chip (its readable bits);
 * an address with no register, or a register with clear-on-read bits (a read would clear
 * them), shows 00. */
HANDLER(do_dump)
{
    uint8_t start = count ? args[0] : 0, i, *end = out + 2, error;
    (void)core;
    if (count && !start)
        return put_error(out, CODE_SYNTAX); /* `D 00` is spelt `D` */
    out[0] = 'd';
    out[1] = ' ';
    if (start)
        end = put_head(out, 'd', start);
    for (i = 0; i < 16u; i++) {
        uint8_t index = find((uint16_t)start + i), value = 0;
        if (index != NO_REGISTER && !COLUMN(index, COL_RCLR)) {
            if ((error = regdev_bus_read((uint8_t)(start + i), &value, 1)) != 0)
                return bus_error(out, error);
            readable(index, &value, 1);
        }
        end = put_hex(end, value);
    }
    return (uint8_t)(end - out);
}

/* G AA NN: one burst read of NN registers from the chip. P AA DD...: every address and value
 * checked, then one burst write, then the block read back in one burst (unless a register of
 * it has clear-on-read bits: then the reply is what was written, as a read would show it, once
 * unread_checked() finds the chip there). */
HANDLER(do_block)
{
    uint8_t addr = args[0], write = core->line[4] == 'P', n = write ? count : args[1], i, *end;
    uint8_t values[REGDEV_MAX_BLOCK], clears = 0, error, first = find(addr);
    if (n < 1u || n > REGDEV_MAX_BLOCK)
        return put_error(out, CODE_SYNTAX); /* G with NN 00 or over 10 */
    for (i = 0; i < n; i++) {
        uint8_t index = find((uint16_t)addr + i);
        if (index == NO_REGISTER)
            return put_error(out, CODE_ADDR);
        clears |= COLUMN(index, COL_RCLR);
        values[i] = args[1u + i];
    }
    for (i = 0; write && i < n; i++)
        if (refuses(find((uint16_t)addr + i), args[1u + i], 0xFFu))
            return put_error(out, CODE_DATA);
    if (write) {
        if ((error = regdev_bus_write(addr, values, n)) != 0)
            return bus_error(out, error);
        for (i = 0; clears && i < n; i++)
            values[i] = (uint8_t)(values[i] & COLUMN(first + i, COL_WRITABLE) &
                                  ~COLUMN(first + i, COL_WOCLR));
        if (clears && (error = unread_checked()) != 0)
            return bus_error(out, error);
    }
    if ((!write || !clears) && (error = regdev_bus_read(addr, values, n)) != 0)
        return bus_error(out, error);
#ifdef VERIFYING
    for (i = 0; write && !clears && i < n; i++)
        if (lost((uint8_t)(first + i), args[1u + i], values[i]))
            return bus_error(out, REGDEV_BUS_VERIFY);
#endif
    readable(first, values, n);
    end = put_head(out, write ? 'p' : 'g', addr);
    for (i = 0; i < n; i++)
        end = put_hex(end, values[i]);
    return (uint8_t)(end - out);
}
#else
HANDLER(do_dump) /* D, or D AA: the 16 addresses from AA as a read shows them, unchanged */
{
    uint8_t start = count ? args[0] : 0, i, *end = out + 2;
    if (count && !start)
        return put_error(out, CODE_SYNTAX); /* `D 00` is spelt `D` */
    out[0] = 'd';
    out[1] = ' ';
    if (start)
        end = put_head(out, 'd', start);
    for (i = 0; i < 16u; i++) {
        uint8_t index = find((uint16_t)start + i);
        end = put_hex(end, index == NO_REGISTER ? 0u : shown(core, index));
    }
    return (uint8_t)(end - out);
}

/* G AA NN (NN reads from AA up) and P AA DD... (writes, all or nothing: every address and
 * value is checked before any is written). One handler: the request's letter tells them
 * apart (it is still in core->line). */
HANDLER(do_block)
{
    uint8_t addr = args[0], write = core->line[4] == 'P', n = write ? count : args[1], i, *end;
    if (n < 1u || n > REGDEV_MAX_BLOCK)
        return put_error(out, CODE_SYNTAX); /* G with NN 00 or over 10 */
    for (i = 0; i < n; i++)
        if (find((uint16_t)addr + i) == NO_REGISTER)
            return put_error(out, CODE_ADDR);
    for (i = 0; write && i < n; i++)
        if (refuses(find((uint16_t)addr + i), args[1u + i], 0xFFu))
            return put_error(out, CODE_DATA);
    end = put_head(out, write ? 'p' : 'g', addr);
    for (i = 0; i < n; i++) {
        uint8_t index = find((uint16_t)addr + i);
        end = put_hex(end, write ? write_register(core, index, args[1u + i], 0xFFu)
                                 : read_register(core, index));
    }
    return (uint8_t)(end - out);
}
#endif

/* --- frames ---------------------------------------------------------------------------- */

/* What fields_fit() returns for fields of another shape. */
#define NO_FIT 0xFFu

/* `n` digits as hex pairs, no spaces, into args (those of them that fit MAX_ARGS from
 * `at`); their count, or NO_FIT when n is odd or a pair is not hex. */
static uint8_t hex_run(const uint8_t *digits, uint8_t n, uint8_t *args, uint8_t at)
{
    uint8_t i;
    if (n % 2u)
        return NO_FIT;
    for (i = 0; i < n / 2u; i++) {
        int16_t value = hex2(digits + 2u * i);
        if (value < 0)
            return NO_FIT;
        if (at + i < MAX_ARGS)
            args[at + i] = (uint8_t)value;
    }
    return (uint8_t)(n / 2u);
}

/* Whether `fields` (n >= 1 bytes) have the shape of `kind`: the count (of hex bytes; of a
 * block's values; of characters), or NO_FIT. Hex bytes go to args (the first MAX_ARGS). */
static uint8_t fields_fit(const kind_t *kind, const uint8_t *fields, uint8_t n, uint8_t *args)
{
    uint8_t i, count;
    switch (kind->shape) {
    case SHAPE_HEX:
        if ((uint8_t)(n + 1u) % 3u)
            return NO_FIT;
        count = (uint8_t)((n + 1u) / 3u);
        for (i = 0; i < count; i++) {
            int16_t value = hex2(fields + 3u * i);
            if (value < 0 || (i + 1u < count && fields[3u * i + 2u] != ' '))
                return NO_FIT;
            if (i < MAX_ARGS)
                args[i] = (uint8_t)value;
        }
        break;
    case SHAPE_BLOCK: {
        int16_t addr = n >= 3u ? hex2(fields) : -1;
        if (addr < 0 || fields[2] != ' ')
            return NO_FIT;
        args[0] = (uint8_t)addr;
        count = hex_run(fields + 3, (uint8_t)(n - 3u), args, 1);
        break;
    }
    case SHAPE_DUMP:
        if (n == 35u && fields[2] == ' ') { /* d AA and 32 digits: AA is not 00 */
            if (hex2(fields) <= 0)
                return NO_FIT;
            fields += 3;
            n = 32;
        }
        count = n == 32u ? hex_run(fields, n, args, MAX_ARGS) : NO_FIT;
        break;
    case SHAPE_TEXT:
        count = n;
        for (i = 0; i < n; i++)
            if (fields[i] < 0x20u || fields[i] > 0x7Eu || fields[i] == '$' || fields[i] == '*')
                return NO_FIT;
        break;
    case SHAPE_CODE:
        count = n;
        for (i = 0; i < n; i++)
            if (fields[i] < 'A' || fields[i] > 'Z')
                return NO_FIT;
        break;
    default:
        return NO_FIT;
    }
    return count >= kind->min && count <= kind->max ? count : NO_FIT;
}

/* A whole line, '$' through the checksum (its LF taken off): check it in the order of
 * docs/protocol.md rule 4, then answer it. */
static uint8_t on_line(regdev_core_t *core, uint8_t n)
{
    const uint8_t *line = core->line, *payload = line + 1;
    int16_t seq, check;
    uint8_t plen, i, count = 0, args[MAX_ARGS] = {0};
    kind_t kind;

    if (n > 1u && line[n - 1u] == '\r') /* a receiver ignores one CR before the LF */
        n--;
    seq = n >= 3u ? hex2(line + 1) : -1;
    if (n < 4u || line[n - 3u] != '*')
        return error_reply(core, seq, CODE_SYNTAX);
    check = hex2(line + n - 2u);
    if (check < 0)
        return error_reply(core, seq, CODE_SYNTAX);
    plen = (uint8_t)(n - 4u);
    if (crc8(payload, plen) != (uint8_t)check)
        return error_reply(core, seq, CODE_CKSUM);
    if (seq < 0 || plen < 4u || payload[2] != ' ' || (plen > 4u && payload[4] != ' '))
        return error_reply(core, seq, CODE_SYNTAX);
    for (i = 0; i < KIND_COUNT; i++) {
        REGDEV_ROM_COPY(&kind, &KINDS[i], sizeof kind);
        if (kind.letter == payload[3])
            break;
    }
    if (i == KIND_COUNT)
        return error_reply(core, seq, CODE_SYNTAX);
    if (plen == 4u ? kind.min != 0u /* no fields: only for a kind that may have none */
                   : kind.shape == SHAPE_NONE ||
                         (count = fields_fit(&kind, payload + 5, (uint8_t)(plen - 5u), args)) ==
                             NO_FIT)
        return error_reply(core, seq, CODE_SYNTAX);
    if (!kind.handle) /* a reply (maybe this device's own echo): never answered */
        return 0;
    return finish(core, (uint8_t)seq, kind.handle(core, core->reply + 4, args, count));
}

void regdev_core_init(regdev_core_t *core, const char *id, uint16_t starts)
{
    uint8_t n = 0;
#ifndef REGDEV_BUS
    reset_registers(core); /* (a bridge's chip starts as it starts) */
#endif
    core->len = 0;
    core->starts = starts;
    core->resets = 0;
    while (id && n <= REGDEV_MAX_ID &&
           ((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'A' && id[n] <= 'Z'))) {
        core->id[n] = id[n];
        n++;
    }
    if (n > REGDEV_MAX_ID || !id || id[n] != 0)
        n = 0; /* not an id: say neither id nor epoch */
    core->id[n] = 0;
}

uint8_t regdev_core_feed(regdev_core_t *core, uint8_t byte)
{
    uint8_t n = core->len;
    if (n == 0) { /* rule 1: outside a frame, drop every byte until a '$' */
        if (byte == '$') {
            core->line[0] = byte;
            core->len = 1;
        }
        return 0;
    }
    if (byte == '$') { /* rule 2: a new '$' inside a frame: bytes were lost */
        int16_t seq = n >= 3u ? hex2(core->line + 1) : -1;
        core->len = 1; /* line[0] is already '$' */
        return error_reply(core, seq, CODE_SYNTAX);
    }
    if (byte == '\n') { /* rule 4 */
        core->len = 0;
        return on_line(core, n);
    }
    core->line[n++] = byte;
    if (n == REGDEV_MAX_FRAME) { /* rule 3: no LF within 64 bytes */
        core->len = 0;
        return error_reply(core, hex2(core->line + 1), CODE_SYNTAX);
    }
    core->len = n;
    return 0;
}
