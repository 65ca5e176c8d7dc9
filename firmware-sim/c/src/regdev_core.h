/* regdev's wire protocol, device side: a portable C99 core (docs/protocol.md).
 *
 * Bytes in, replies out, one byte at a time. No I/O, no allocation, no globals: the caller
 * owns a regdev_core_t, feeds it every byte read from the line, and sends the reply a byte
 * completes. It gives the same replies, byte for byte, as regdev's Python codec in its
 * device role (src/regdev/devices/_protocol.py with firmware-sim/regdev_firmware_sim.py), which
 * tests/test_firmware_c.py checks on random damaged byte streams.
 *
 * Fixed-width types only: `int` is 16 bits on an AVR.
 *
 *     regdev_core_t core;
 *     regdev_core_init(&core, "5F3A9C01", start_count);
 *     for each byte b read from the line:
 *         uint8_t n = regdev_core_feed(&core, b);
 *         if (n) send core.reply[0..n-1];
 *
 * The register table (reset values, access, reserved, write-1-to-clear and clear-on-read
 * bits) comes from regmap.h, which firmware-sim/c/gen_regmap.py generates from a register
 * map; the frame kinds are one table in regdev_core.c.
 */
#ifndef REGDEV_CORE_H
#define REGDEV_CORE_H

#include <stdint.h>

/* Largest frame on the wire, in bytes, '$' through LF (a CR before the LF counts). */
#define REGDEV_MAX_FRAME 64u
/* Registers of protocol version 1: addresses 0x00..0x0F, one byte each. */
#define REGDEV_REGISTER_COUNT 16u

/* Access bits of regmap.h's regdev_map_access table. */
#define REGDEV_PRESENT 0x01u  /* an address with no register answers e ADDR */
#define REGDEV_READABLE 0x02u /* else reads and dumps give 0 */
#define REGDEV_WRITABLE 0x04u /* else a write is refused with e DATA */

/* The platform's name in the identify text ("uno", "host"; at most 4 characters). */
#ifndef REGDEV_PLATFORM
#define REGDEV_PLATFORM "host"
#endif

/* Longest identify text, and longest device id, in bytes (docs/protocol.md). */
#define REGDEV_MAX_TEXT 48u
#define REGDEV_MAX_ID 16u

/* Who the device is, and when it last started over (docs/protocol.md): the identify text is
 * "<description> id=<ID> epoch=<BBBBRRRR>", the description cut to fit 48 bytes. BBBB is the
 * platform's start count (kept where a restart does not lose it: EEPROM on the Uno), RRRR
 * the number of Z executed since that start; both 4 upper-case hex digits. */
typedef struct regdev_core {
    uint8_t regs[REGDEV_REGISTER_COUNT];  /* the register file */
    uint8_t line[REGDEV_MAX_FRAME];       /* the frame being received, from its '$' */
    uint8_t len;                          /* bytes in line; 0 while hunting for a '$' */
    uint8_t reply[REGDEV_MAX_FRAME];      /* the last reply, '$' through LF */
    char id[REGDEV_MAX_ID + 1u];          /* the device id; "" says neither id nor epoch */
    uint16_t starts;                      /* BBBB: the start count this epoch began in */
    uint16_t resets;                      /* RRRR: Z executed since that start */
} regdev_core_t;

/* Start: every register at its reset value, hunting for a frame, the reset count 0.
 * `id` is 1..16 characters of 0-9 and A-Z (copied; anything else, or NULL, and the device
 * says neither its id nor its epoch: protocol 1's plain identify text); `starts` is this
 * start's count, which the platform has already made new (counted in EEPROM, on the Uno). */
void regdev_core_init(regdev_core_t *core, const char *id, uint16_t starts);

/* Given by the platform: the next start count, made new (kept where a restart does not lose
 * it), after `starts`. The core calls it when a Z would take the reset count past FFFF, and
 * restarts that count at 0000, so an epoch is never said twice. */
uint16_t regdev_core_next_start(uint16_t starts);

/* Take one byte from the line. Returns the length (1..64) of the reply it completes, now in
 * core->reply, or 0 when there is nothing to send. A byte completes at most one reply: the
 * LF of a frame, a '$' that cuts a frame short (rule 2), the 64th byte of a frame without
 * LF (rule 3). The reply must be sent (or copied) before the next call. */
uint8_t regdev_core_feed(regdev_core_t *core, uint8_t byte);

/* The identify text's description, "regdev C/<platform> <map name>" (1..48 printable ASCII
 * bytes; in ROM on an AVR). With an id and epoch it is cut to fit the 48 bytes. */
extern const char regdev_identity[];

#endif
