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
#include "regdev_core.h"

#include "regdev_rom.h"
#include "regmap.h"

#define ID_TEXT "regdev C/" REGDEV_PLATFORM " " REGDEV_MAP_NAME
/* The description alone is a whole identify text, 1..48 bytes (docs/protocol.md); a longer
 * one fails to compile. */
typedef char regdev_identity_fits[(sizeof(ID_TEXT) - 1u <= REGDEV_MAX_TEXT) ? 1 : -1];
const char regdev_identity[] REGDEV_ROM = ID_TEXT;
static const char TEXT_ID[] REGDEV_ROM = " id=";
static const char TEXT_EPOCH[] REGDEV_ROM = " epoch=";
/* The bytes of " id=" and " epoch=", and of the epoch BBBBRRRR. */
#define EXTENSION_BYTES 11u
#define EPOCH_DIGITS 8u

static const char CODE_ADDR[] REGDEV_ROM = "ADDR";
static const char CODE_DATA[] REGDEV_ROM = "DATA";
static const char CODE_CKSUM[] REGDEV_ROM = "CKSUM";
static const char CODE_SYNTAX[] REGDEV_ROM = "SYNTAX";

/* --- the shapes of fields ------------------------------------------------------------- */

enum {
    SHAPE_NONE,   /* no fields: the frame is "SS L" exactly */
    SHAPE_HEX,    /* min..max bytes as hex pairs, one space apart: "03 FF" */
    SHAPE_HEXRUN, /* min..max bytes as hex pairs, no spaces: the dump's 32 digits */
    SHAPE_TEXT,   /* min..max printable ASCII bytes other than '$' and '*' */
    SHAPE_CODE    /* min..max letters A-Z (an error code) */
};

/* Most hex bytes a request carries (W: address and data). */
#define MAX_ARGS 2u

/* Writes a reply's letter and fields at `out`; returns how many bytes it wrote. */
typedef uint8_t (*handler_t)(regdev_core_t *core, uint8_t *out, const uint8_t *args);

typedef struct {
    uint8_t letter;
    uint8_t shape;
    uint8_t min, max; /* counts of bytes (hex shapes) or characters (text, code) */
    handler_t handle; /* 0 for a reply frame: dropped without an answer */
} kind_t;

static uint8_t do_identify(regdev_core_t *core, uint8_t *out, const uint8_t *args);
static uint8_t do_read(regdev_core_t *core, uint8_t *out, const uint8_t *args);
static uint8_t do_write(regdev_core_t *core, uint8_t *out, const uint8_t *args);
static uint8_t do_reset(regdev_core_t *core, uint8_t *out, const uint8_t *args);
static uint8_t do_dump(regdev_core_t *core, uint8_t *out, const uint8_t *args);

/* Every frame of docs/protocol.md, "The frames". */
static const kind_t KINDS[] REGDEV_ROM = {
    {'I', SHAPE_NONE, 0, 0, do_identify},
    {'R', SHAPE_HEX, 1, 1, do_read},
    {'W', SHAPE_HEX, 2, 2, do_write},
    {'Z', SHAPE_NONE, 0, 0, do_reset},
    {'D', SHAPE_NONE, 0, 0, do_dump},
    {'i', SHAPE_TEXT, 1, 48, 0},
    {'r', SHAPE_HEX, 2, 2, 0},
    {'w', SHAPE_HEX, 2, 2, 0},
    {'z', SHAPE_NONE, 0, 0, 0},
    {'d', SHAPE_HEXRUN, REGDEV_REGISTER_COUNT, REGDEV_REGISTER_COUNT, 0},
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

/* r/w AA DD */
static uint8_t put_register(uint8_t *out, uint8_t letter, uint8_t addr, uint8_t value)
{
    out[0] = letter;
    out[1] = ' ';
    put_hex(out + 2, addr);
    out[4] = ' ';
    put_hex(out + 5, value);
    return 7;
}

/* --- the register file (regmap.h) ----------------------------------------------------- */

/* What a read (or dump) of `addr` shows: reserved bits 0, a write-only register 0. */
static uint8_t visible(const regdev_core_t *core, uint8_t addr)
{
    if (!(REGDEV_ROM_BYTE(&regdev_map_access[addr]) & REGDEV_READABLE))
        return 0;
    return (uint8_t)(core->regs[addr] & ~REGDEV_ROM_BYTE(&regdev_map_reserved[addr]));
}

static uint8_t present(uint8_t addr)
{
    return addr < REGDEV_REGISTER_COUNT &&
           (REGDEV_ROM_BYTE(&regdev_map_access[addr]) & REGDEV_PRESENT);
}

static void reset_registers(regdev_core_t *core)
{
    uint8_t addr;
    for (addr = 0; addr < REGDEV_REGISTER_COUNT; addr++)
        core->regs[addr] = REGDEV_ROM_BYTE(&regdev_map_reset[addr]);
}

/* --- the requests ---------------------------------------------------------------------- */

/* i <description> id=<ID> epoch=<BBBBRRRR>, the description cut (and stripped of the spaces
 * the cut leaves at its end) to fit 48 bytes; without an id, the description alone. */
static uint8_t do_identify(regdev_core_t *core, uint8_t *out, const uint8_t *args)
{
    const char *text = regdev_identity, *id = core->id;
    uint8_t *start = out + 2, *end = start, room = REGDEV_MAX_TEXT, c;
    (void)args;
    out[0] = 'i';
    out[1] = ' ';
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

static uint8_t do_read(regdev_core_t *core, uint8_t *out, const uint8_t *args)
{
    uint8_t addr = args[0], value;
    if (!present(addr))
        return put_error(out, CODE_ADDR);
    value = visible(core, addr);
    if (REGDEV_ROM_BYTE(&regdev_map_access[addr]) & REGDEV_READABLE)
        core->regs[addr] &= (uint8_t)~REGDEV_ROM_BYTE(&regdev_map_rclr[addr]);
    return put_register(out, 'r', addr, value);
}

static uint8_t do_write(regdev_core_t *core, uint8_t *out, const uint8_t *args)
{
    uint8_t addr = args[0], data = args[1], woclr, keep;
    if (!present(addr))
        return put_error(out, CODE_ADDR);
    if (!(REGDEV_ROM_BYTE(&regdev_map_access[addr]) & REGDEV_WRITABLE))
        return put_error(out, CODE_DATA); /* read-only: refused, not executed */
    woclr = REGDEV_ROM_BYTE(&regdev_map_woclr[addr]);
    /* write-1-to-clear bits keep their value where a 0 is written and clear where a 1 is;
     * every other bit takes the data; reserved bits are never set */
    keep = (uint8_t)(core->regs[addr] & woclr & (uint8_t)~data);
    core->regs[addr] = (uint8_t)((keep | (data & (uint8_t)~woclr)) &
                                 (uint8_t)~REGDEV_ROM_BYTE(&regdev_map_reserved[addr]));
    /* the w reply carries what the register holds now (a write-only one too) */
    return put_register(out, 'w', addr, core->regs[addr]);
}

static uint8_t do_reset(regdev_core_t *core, uint8_t *out, const uint8_t *args)
{
    (void)args;
    reset_registers(core);
    /* a new epoch: one more reset, or past FFFF resets, a new start count */
    if (++core->resets == 0)
        core->starts = regdev_core_next_start(core->starts);
    out[0] = 'z';
    return 1;
}

static uint8_t do_dump(regdev_core_t *core, uint8_t *out, const uint8_t *args)
{
    uint8_t addr, *end = out + 2;
    (void)args;
    out[0] = 'd';
    out[1] = ' ';
    for (addr = 0; addr < REGDEV_REGISTER_COUNT; addr++)
        end = put_hex(end, visible(core, addr));
    return (uint8_t)(end - out);
}

/* --- frames ---------------------------------------------------------------------------- */

/* Whether `fields` (n bytes) have the shape of `kind`; hex bytes go to args (the first
 * MAX_ARGS of them). */
static uint8_t fields_fit(const kind_t *kind, const uint8_t *fields, uint8_t n, uint8_t *args)
{
    uint8_t i, count;
    switch (kind->shape) {
    case SHAPE_HEX:
        if ((uint8_t)(n + 1u) % 3u)
            return 0;
        count = (uint8_t)((n + 1u) / 3u);
        for (i = 0; i < count; i++) {
            int16_t value = hex2(fields + 3u * i);
            if (value < 0 || (i + 1u < count && fields[3u * i + 2u] != ' '))
                return 0;
            if (i < MAX_ARGS)
                args[i] = (uint8_t)value;
        }
        break;
    case SHAPE_HEXRUN:
        if (n % 2u)
            return 0;
        count = (uint8_t)(n / 2u);
        for (i = 0; i < count; i++)
            if (hex2(fields + 2u * i) < 0)
                return 0;
        break;
    case SHAPE_TEXT:
        count = n;
        for (i = 0; i < n; i++)
            if (fields[i] < 0x20u || fields[i] > 0x7Eu || fields[i] == '$' || fields[i] == '*')
                return 0;
        break;
    case SHAPE_CODE:
        count = n;
        for (i = 0; i < n; i++)
            if (fields[i] < 'A' || fields[i] > 'Z')
                return 0;
        break;
    default:
        return 0;
    }
    return count >= kind->min && count <= kind->max;
}

/* A whole line, '$' through the checksum (its LF taken off): check it in the order of
 * docs/protocol.md rule 4, then answer it. */
static uint8_t on_line(regdev_core_t *core, uint8_t n)
{
    const uint8_t *line = core->line, *payload = line + 1;
    int16_t seq, check;
    uint8_t plen, i, args[MAX_ARGS] = {0, 0};
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
    if (kind.shape == SHAPE_NONE ? plen != 4u
                                 : plen <= 4u || !fields_fit(&kind, payload + 5, (uint8_t)(plen - 5u), args))
        return error_reply(core, seq, CODE_SYNTAX);
    if (!kind.handle) /* a reply (maybe this device's own echo): never answered */
        return 0;
    return finish(core, (uint8_t)seq, kind.handle(core, core->reply + 4, args));
}

void regdev_core_init(regdev_core_t *core, const char *id, uint16_t starts)
{
    uint8_t n = 0;
    reset_registers(core);
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
