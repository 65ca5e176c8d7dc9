/* Run an AVR image in simavr with USART0 bridged to a pseudo-terminal.
 *
 *     regdev-simavr [--link PATH] [--eeprom FILE [--id ID]] [--stats] [-v] [--poll-us N]
 *                   [--mcu NAME] [--freq HZ] [--i2c-chip FILE [--i2c-fault KIND]]
 *                   [--spi-chip FILE [--spi-fault KIND]] IMAGE.elf
 *
 * Like `regdev firmware-sim --pty`: the first line of standard output is the port to open
 * (the pty's path, or PATH with --link, a symlink to it), flushed; then the image runs, in
 * real time, until SIGINT, SIGTERM or SIGHUP (exit 0). --stats prints on stderr at exit how
 * many cycles ran in how much wall-clock and CPU time; -v logs each line the image sends and
 * receives, and simavr's own messages, on stderr. --poll-us N: how often, in simulated
 * microseconds, bytes waiting on the pty are moved into the UART (100; 0: once a simulated
 * millisecond, which adds about 1 ms to a read round trip). The MCU and clock come from the image's
 * .mmcu section when it has one, else from --mcu (atmega328p) and --freq (16000000, in
 * 1..100000000 Hz; --poll-us is 0..1000000: a number outside, or not in decimal digits, is
 * refused in one line naming the flag and the range). Failures: one line on stderr, exit status 2 (cannot start) or 1 (the image crashed or
 * stopped).
 * Each line it writes on stderr starts with the name it was run by (the last part of argv[0]:
 * `regdev firmware-sim --avr` runs it as `regdev firmware-sim`).
 *
 * The EEPROM is the board's: the firmware keeps its id and its start count there
 * (avr/eeprom_layout.h). --eeprom FILE keeps it in FILE (its bytes, as many as the MCU has),
 * loaded at start and saved whenever the image changed it (checked every simulated
 * millisecond, and at exit), so that a restart is a power cycle of the same board: same id, next start count,
 * a new epoch. A FILE that does not exist yet is a new board whose id a programmer wrote:
 * --id ID (8 upper-case hex digits) or 8 random ones; an existing FILE keeps its id (--id must match). A
 * FILE without an id (an erased chip's FF) is a board the firmware draws its own id on.
 * Without --eeprom the EEPROM lasts the run, with a random id: a new board each run (--id
 * without --eeprom is refused: a fixed id would say the same epochs again after a restart).
 *
 * The bridge between USART0 and the pty is its own (below), in simavr's thread: simavr 1.6's
 * uart_pty part can stop moving bytes for good (its thread copies what it read from the pty
 * into its FIFO only when select() says something else is ready: after a read larger than the
 * room left, one over-long line or a burst of noise left the board deaf), and it needs a thread
 * of its own, signals blocked around it, and a /tmp/simavr-uart0 link. It minds how simavr 1.6
 * behaves:
 * - avr_make_mcu_by_name leaves the clock at 1 MHz: the frequency is set before the image runs
 *   (its UBRR0 setting is turned into a bit time by it).
 * - libsimavr prints to standard output: file descriptor 1 is pointed at stderr (with -v) or
 *   /dev/null before simavr starts, and the port goes to the saved one.
 * - AVR_UART_FLAG_POLL_SLEEP (on by default) sleeps 1 us on every read of UCSR0A that finds
 *   nothing: cleared, so a firmware polling UDRE0 while it sends is not slowed down.
 * - The UART's input FIFO (64 bytes) drops a byte that comes when it is full: the bridge moves
 *   no more bytes from the pty than the FIFO has room for; the rest wait in the pty (the
 *   kernel's buffer), so no byte a host sends is lost however much it sends at once.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "avr_eeprom.h"
#include "avr_ioport.h"
#include "avr_spi.h"
#include "avr_twi.h"
#include "avr_uart.h"
#include "eeprom_layout.h"
#include "sim_avr.h"
#include "sim_elf.h"
#include "sim_time.h"

#include "../host/own_file.h"
#include "../host/own_link.h"

/* The name its messages start with: argv[0]'s last part ("regdev-simavr" run by hand;
 * regdev firmware-sim --avr runs it as "regdev firmware-sim", so its lines are regdev's). */
static const char *prog = "regdev-simavr";
/* The ranges of --freq (hertz: an AVR runs at 20 MHz at most; simavr's clock is a uint32)
 * and --poll-us (simulated microseconds: a second at most). */
#define MAX_FREQ 100000000UL
#define MAX_POLL_US 1000000UL

static volatile sig_atomic_t stop;
static int verbose;
static const char *link_path;
static own_link_t link_made;

static void on_signal(int number)
{
    (void)number;
    stop = 1;
}

static void quiet_logger(avr_t *avr, const int level, const char *format, va_list ap)
{
    (void)avr;
    if (level <= LOG_ERROR || (verbose && level <= LOG_WARNING)) {
        fprintf(stderr, "%s: simavr: ", prog);
        vfprintf(stderr, format, ap);
    }
}

static void cleanup_links(void)
{
    own_link_remove(&link_made);
}

static int fail(const char *what, const char *detail)
{
    fprintf(stderr, "%s: error: %s: %s\n", prog, what, detail);
    return 2;
}

/* -v: each line the image sends or receives, on stderr ("<-" in, "->" out). */
typedef struct {
    const char *arrow;
    char text[512];
    size_t len;
} line_log_t;
static line_log_t log_in = {"<- ", {0}, 0}, log_out = {"-> ", {0}, 0};

static void log_byte(line_log_t *log, uint32_t value)
{
    if (log->len < sizeof log->text - 5) {
        if (value >= 0x20 && value < 0x7F && value != '\\')
            log->text[log->len++] = (char)value;
        else
            log->len += (size_t)snprintf(log->text + log->len, 5, "\\x%02x", value & 0xFFu);
    }
    if (value == '\n') {
        fprintf(stderr, "%s%.*s\n", log->arrow, (int)log->len, log->text);
        log->len = 0;
    }
}

/* --- the bridge: USART0 and a pseudo-terminal, in simavr's thread ---------------------- */

static int pty_master = -1, pty_slave = -1;
static char pty_name[256];
static avr_uart_t *uart0;
static avr_irq_t *uart_input;
/* What the image sent and the pty has not taken yet (nobody reads it: the pty's buffer is
 * full). Past this, the oldest bytes are dropped, as a line nobody listens on loses them. */
static uint8_t tx_ring[4096];
static size_t tx_head, tx_len;

static void flush_output(void)
{
    while (tx_len > 0) {
        size_t run = sizeof tx_ring - tx_head;
        ssize_t done = write(pty_master, tx_ring + tx_head, run < tx_len ? run : tx_len);
        if (done <= 0)
            return; /* EAGAIN: the pty is full; the next poll tries again */
        tx_head = (tx_head + (size_t)done) % sizeof tx_ring;
        tx_len -= (size_t)done;
    }
}

/* A byte the image sent: to the pty. */
static void on_output(struct avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)param;
    if (verbose)
        log_byte(&log_out, value);
    if (tx_len == sizeof tx_ring) {
        tx_head = (tx_head + 1u) % sizeof tx_ring;
        tx_len--;
    }
    tx_ring[(tx_head + tx_len) % sizeof tx_ring] = (uint8_t)value;
    tx_len++;
    flush_output();
}

/* Every --poll-us (or simulated millisecond): the output the pty could not take, then as many
 * waiting bytes from the pty as the UART's input FIFO has room for, once the image has
 * enabled the receiver (until then they wait in the pty, as uart_pty kept them until XON). */
static avr_cycle_count_t poll_cycles;
static avr_cycle_count_t poll_bridge(avr_t *avr, avr_cycle_count_t when, void *param)
{
    uint8_t bytes[uart_fifo_fifo_size];
    unsigned used = (unsigned)(uart0->input.write - uart0->input.read) &
                    (uart_fifo_fifo_size - 1u);
    size_t room = uart_fifo_fifo_size - 1u - used;
    (void)param;
    if (tx_len > 0)
        flush_output();
    if (room > 0 && avr_regbit_get(avr, uart0->rxen)) { /* (a byte before RXEN is lost) */
        ssize_t got = read(pty_master, bytes, room), i;
        for (i = 0; i < got; i++) {
            if (verbose)
                log_byte(&log_in, bytes[i]);
            avr_raise_irq(uart_input, bytes[i]);
        }
    }
    return when + poll_cycles;
}

/* The MCU's USART0, found among its IO modules; NULL when it has none. */
static avr_uart_t *find_uart0(avr_t *avr)
{
    avr_io_t *io;
    for (io = avr->io_port; io; io = io->next)
        if (io->kind && strcmp(io->kind, "uart") == 0 && ((avr_uart_t *)io)->name == '0')
            return (avr_uart_t *)io;
    return NULL;
}

/* A pty in raw mode (no echo, no line editing, 8 bits through), its master non-blocking;
 * the slave stays open here too, so that a host closing its end leaves the pty usable. */
static int open_bridge(void)
{
    struct termios tio;
    if (openpty(&pty_master, &pty_slave, pty_name, NULL, NULL) < 0)
        return -1;
    if (tcgetattr(pty_slave, &tio) < 0)
        return -1;
    cfmakeraw(&tio);
    if (tcsetattr(pty_slave, TCSANOW, &tio) < 0)
        return -1;
    return fcntl(pty_master, F_SETFL, fcntl(pty_master, F_GETFL) | O_NONBLOCK);
}

/* --eeprom: the board's EEPROM in a file. */
static const char *eeprom_path;
static uint8_t *eeprom_live, *eeprom_saved;
static uint32_t eeprom_size;

/* Write the EEPROM to its file (through a temporary file of its own and a rename, see
 * own_file.h) if it changed since the last time; -1 with errno set when it cannot be
 * written. */
static int save_eeprom(int force)
{
    if (!eeprom_path || (!force && memcmp(eeprom_live, eeprom_saved, eeprom_size) == 0))
        return 0;
    if (own_file_replace(eeprom_path, eeprom_live, eeprom_size) < 0)
        return -1;
    memcpy(eeprom_saved, eeprom_live, eeprom_size);
    return 0;
}

static int eeprom_failed;
static avr_cycle_count_t eeprom_cycles;
static avr_cycle_count_t poll_eeprom(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)avr;
    (void)param;
    if (save_eeprom(0) < 0) {
        eeprom_failed = errno ? errno : EIO;
        stop = 1; /* the board cannot keep its start count: it stops */
    }
    return when + eeprom_cycles;
}

/* A whole number in lo..hi written in decimal digits alone (no sign, no space, no 1e3), into
 * `out`; else a one-line error naming `flag`, what it counts and the range, and -1. */
static int parse_number(const char *flag, const char *unit, const char *text,
                        unsigned long lo, unsigned long hi, unsigned long *out)
{
    size_t n = strlen(text);
    unsigned long value = 0;
    int ok = n >= 1 && n <= 10 && strspn(text, "0123456789") == n;
    if (ok) {
        errno = 0;
        value = strtoul(text, NULL, 10);
        ok = errno == 0 && value >= lo && value <= hi;
    }
    if (!ok) {
        fprintf(stderr, "%s: error: %s: expected a whole number of %s in %lu..%lu, got "
                        "`%s`\n", prog, flag, unit, lo, hi, text);
        return -1;
    }
    *out = value;
    return 0;
}

/* 8 upper-case hex digits: an id the EEPROM can hold (4 bytes). */
static int parse_id(const char *text, uint8_t id[REGDEV_EE_ID_BYTES])
{
    unsigned i;
    if (strlen(text) != 2u * REGDEV_EE_ID_BYTES || strspn(text, "0123456789ABCDEF") != strlen(text))
        return -1;
    for (i = 0; i < REGDEV_EE_ID_BYTES; i++) {
        char pair[3] = {text[2 * i], text[2 * i + 1], 0};
        id[i] = (uint8_t)strtoul(pair, NULL, 16);
    }
    return 0;
}

/* Load the EEPROM (`ee`, `size` bytes, erased) from --eeprom's file (0), or program a new
 * board: the magic, `id` (or random bytes when `wanted` is 0), start count 0 (1); -1 and
 * `why` when it cannot. */
static int setup_eeprom(uint8_t *ee, uint32_t size, int wanted, const uint8_t *id, char *why,
                        size_t why_size)
{
    uint8_t drawn[REGDEV_EE_ID_BYTES];
    uint32_t magic = REGDEV_EE_MAGIC;
    FILE *in = eeprom_path ? fopen(eeprom_path, "rb") : NULL;
    if (in) {
        size_t got = fread(ee, 1, size, in);
        int more = fgetc(in) != EOF;
        fclose(in);
        if (got != size || more) {
            snprintf(why, why_size, "the EEPROM file %s is not %lu bytes (the %s's EEPROM)",
                     eeprom_path, (unsigned long)size, "MCU");
            return -1;
        }
        if (wanted && memcmp(ee + REGDEV_EE_MAGIC_AT, &magic, 4) == 0 &&
            memcmp(ee + REGDEV_EE_ID_AT, id, REGDEV_EE_ID_BYTES) != 0) {
            snprintf(why, why_size, "the EEPROM file %s holds id %02X%02X%02X%02X, not the "
                     "--id given", eeprom_path, ee[REGDEV_EE_ID_AT], ee[REGDEV_EE_ID_AT + 1],
                     ee[REGDEV_EE_ID_AT + 2], ee[REGDEV_EE_ID_AT + 3]);
            return -1;
        }
        return 0;
    }
    if (eeprom_path && errno != ENOENT) {
        snprintf(why, why_size, "cannot read the EEPROM file %s: %s", eeprom_path,
                 strerror(errno));
        return -1;
    }
    if (!wanted) {
        FILE *random = fopen("/dev/urandom", "rb");
        size_t got = random ? fread(drawn, 1, sizeof drawn, random) : 0;
        if (random)
            fclose(random);
        if (got != sizeof drawn) {
            snprintf(why, why_size, "cannot draw an id from /dev/urandom");
            return -1;
        }
        id = drawn;
    }
    memcpy(ee + REGDEV_EE_MAGIC_AT, &magic, 4); /* little-endian, as the AVR reads it */
    memcpy(ee + REGDEV_EE_ID_AT, id, REGDEV_EE_ID_BYTES);
    ee[REGDEV_EE_STARTS_AT] = ee[REGDEV_EE_STARTS_AT + 1] = 0;
    return 1;
}

/* --- a simulated I2C chip on the TWI (--i2c-chip FILE, --i2c-fault KIND) -------------------
 *
 * The chip a bridge image forwards to: its registers come from FILE, which gen_regmap.py
 * writes from the same map as the image (--chip: "i2c ADDRESS ADDR_WIDTH AUTO_INCREMENT", then
 * one line a register, "ADDR RESET WRITABLE READABLE WOCLR RCLR" in hex). It answers its
 * 7-bit address: a write's first byte (two with a 16-bit address width, high first) sets its
 * register pointer, each further byte is written to the register there (writable bits take
 * it, write-1-to-clear bits clear where it has a 1, others keep theirs; an address with no
 * register takes nothing), and a read returns the readable bits, then clears the
 * clear-on-read ones; the pointer steps after each byte when the chip auto-increments. SDA and
 * SCL are pulled up (the board's resistors), unless a fault holds one low.
 *
 * With -v, each transfer the chip takes part in is one line on stderr, from its START to its
 * STOP: `i2c 0x76: w F4 27` (the bytes after SLA+W: the register address, then the data
 * written), `i2c 0x76: w F7, r 80 00 00` (a read: the register address, a repeated START and
 * the bytes read, in one burst); and at exit the registers the chip holds, write-only bits
 * included: `chip: 88=70 89=6B ...` (address=value, in hex, address order).
 *
 * --i2c-fault KIND, one fault for the whole run:
 *   nack-address  the chip never acknowledges its address (as a chip that is absent)
 *   nack-data     it acknowledges its address and the register address, no data byte after
 *   arbitration   every START loses arbitration (another master on the bus)
 *   sda-low       SDA held low: a stuck bus
 *   stretch       at every byte after its address the chip holds SCL low until the master
 *                 sends a STOP (the bridge gives up after its 25 ms bound)
 */
enum { FAULT_NONE, FAULT_NACK_ADDRESS, FAULT_NACK_DATA, FAULT_ARBITRATION, FAULT_SDA_LOW,
       FAULT_STRETCH, FAULT_MISO_HIGH, FAULT_MISO_LOW, FAULT_IGNORE_WRITES };
static const char *const FAULTS[] = {"", "nack-address", "nack-data", "arbitration", "sda-low",
                                     "stretch", "miso-high", "miso-low", "ignore-writes"};
/* The first of the SPI chip's faults (--spi-fault); those before it are the I2C chip's. */
#define FIRST_SPI_FAULT FAULT_MISO_HIGH
typedef struct {
    uint8_t present, reset, writable, readable, woclr, rclr, value;
} chip_reg_t;
static struct {
    avr_t *avr;
    avr_twi_t *twi;
    avr_irq_t *irq;            /* the chip's end: [0] to the TWI, [1] from it */
    avr_irq_t *sda, *scl;
    uint8_t address, addr_width, auto_increment, fault;
    /* an SPI chip (the file's first word is "spi"): its mode, chip-select pin and framing */
    uint8_t spi, mode, cs_bit, read_mask, write_mask, writing;
    char cs_port;
    avr_spi_t *spi_io;
    uint8_t selected, reading;  /* addressed since the last START; SLA+R */
    uint8_t index;              /* bytes written since SLA+W */
    uint16_t pointer;
    chip_reg_t regs[256];
    /* SPI, 8-bit addresses: the register an address byte names once its read and write bits
     * are taken out (0x50 is the BME280's 0xD0, bit 7 being the read bit) */
    uint8_t wire_register[256];
} chip;

static avr_twi_t *find_twi(avr_t *avr)
{
    avr_io_t *io;
    for (io = avr->io_port; io; io = io->next)
        if (io->kind && strcmp(io->kind, "twi") == 0)
            return (avr_twi_t *)io;
    return NULL;
}

/* The TWI's pending status (the step the firmware waits on), cancelled. */
static void cancel_step(avr_t *avr)
{
    avr_cycle_timer_slot_p slot;
    for (slot = avr->cycle_timers.timer; slot; slot = slot->next)
        if (slot->param == chip.twi) {
            avr_cycle_timer_cancel(avr, slot->timer, chip.twi);
            break;
        }
}

/* The chip holds SCL low: the step does not end. */
static avr_cycle_count_t hold_clock(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)when;
    (void)param;
    cancel_step(avr);
    avr_raise_irq(chip.scl, 0);
    return 0;
}

/* Another master won the bus: the step ends with status 38. */
static avr_cycle_count_t lose_arbitration(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)when;
    (void)param;
    cancel_step(avr);
    avr_regbit_setto_raw(avr, chip.twi->twsr, 0x38);
    avr_raise_interrupt(avr, &chip.twi->twi);
    return 0;
}

/* -v: the transfer under way, as logged at its STOP (above). */
static char xfer[160];
static size_t xfer_len;

static void xfer_add(const char *format, unsigned value)
{
    if (verbose && xfer_len < sizeof xfer - 8u)
        xfer_len += (size_t)snprintf(xfer + xfer_len, sizeof xfer - xfer_len, format, value);
}

static void xfer_end(void)
{
    if (verbose && xfer_len)
        fprintf(stderr, "i2c 0x%02X:%.*s\n", chip.address, (int)xfer_len, xfer);
    xfer_len = 0;
}

/* -v, at exit: every register the chip holds. */
static void dump_chip(void)
{
    unsigned a;
    fprintf(stderr, "chip:");
    for (a = 0; a < 256u; a++)
        if (chip.regs[a].present)
            fprintf(stderr, " %02X=%02X", a, chip.regs[a].value);
    fprintf(stderr, "\n");
}

static void chip_ack(int ack)
{
    avr_raise_irq(chip.irq + TWI_IRQ_INPUT, avr_twi_irq_msg(TWI_COND_ACK, chip.selected, ack));
}

/* A byte written to the register at the pointer: writable bits take it, write-1-to-clear
 * bits clear where it has a 1, others keep theirs; an address with no register takes
 * nothing. */
static void chip_write(uint8_t byte)
{
    if (chip.pointer < 256u) {
        chip_reg_t *reg = &chip.regs[chip.pointer];
        uint8_t store = (uint8_t)(reg->writable & ~reg->woclr);
        if (reg->present)
            reg->value = (uint8_t)(((reg->value & ~store) | (byte & store)) &
                                   ~(reg->woclr & byte));
    }
}

/* A read of the register at the pointer: its readable bits (0 at an address with no
 * register), then its clear-on-read bits cleared. */
static uint8_t chip_read(void)
{
    uint8_t byte = 0;
    if (chip.pointer < 256u && chip.regs[chip.pointer].present) {
        chip_reg_t *reg = &chip.regs[chip.pointer];
        byte = (uint8_t)(reg->value & reg->readable);
        reg->value = (uint8_t)(reg->value & ~reg->rclr);
    }
    return byte;
}

static void chip_step(void)
{
    if (chip.auto_increment)
        chip.pointer = (uint16_t)((chip.pointer + 1u) & 0xFFFFu);
}

static void on_twi(struct avr_irq_t *irq, uint32_t value, void *param)
{
    avr_twi_msg_irq_t msg;
    (void)irq;
    (void)param;
    msg.u.v = value;
    if (msg.u.twi.msg & TWI_COND_STOP) {
        xfer_end();
        chip.selected = 0;
        if (chip.fault == FAULT_STRETCH)
            avr_raise_irq(chip.scl, 1); /* the master gave up: the clock is let go */
    }
    if (msg.u.twi.msg & TWI_COND_START) {
        chip.selected = 0;
        if (chip.fault == FAULT_ARBITRATION) {
            avr_cycle_timer_register(chip.avr, 1, lose_arbitration, NULL);
            return;
        }
        if ((msg.u.twi.addr >> 1) == chip.address && chip.fault != FAULT_NACK_ADDRESS) {
            chip.selected = msg.u.twi.addr;
            chip.reading = msg.u.twi.addr & 1u;
            chip.index = 0;
            xfer_add(xfer_len ? ", %c" : " %c", chip.reading ? 'r' : 'w');
            chip_ack(1);
        }
        return;
    }
    if (!chip.selected)
        return;
    if (chip.fault == FAULT_STRETCH) {
        avr_cycle_timer_register(chip.avr, 1, hold_clock, NULL);
        return;
    }
    if (msg.u.twi.msg & TWI_COND_WRITE) {
        uint8_t byte = msg.u.twi.data, width = chip.addr_width / 8u;
        xfer_add(" %02X", byte);
        if (chip.index < width) {
            chip.pointer = (uint16_t)(chip.index ? (chip.pointer << 8) | byte : byte);
            chip.index++;
            chip_ack(1);
            return;
        }
        if (chip.fault == FAULT_NACK_DATA) {
            chip_ack(0);
            return;
        }
        chip_write(byte);
        chip_step();
        chip_ack(1);
    }
    if (msg.u.twi.msg & TWI_COND_READ) {
        uint8_t byte = chip_read();
        chip_step();
        xfer_add(" %02X", byte);
        avr_raise_irq(chip.irq + TWI_IRQ_INPUT,
                      avr_twi_irq_msg(TWI_COND_READ, chip.selected, byte));
    }
}

/* Read the chip's table; -1 and `why` when it cannot. */
static int load_chip(const char *path, char *why, size_t why_size)
{
    FILE *in = fopen(path, "r");
    char kind[8];
    unsigned address = 0, width = 0, autoinc = 0, a, r, w, rd, wc, rc;
    if (!in) {
        snprintf(why, why_size, "cannot read the chip file %s: %s", path, strerror(errno));
        return -1;
    }
    int ok = fscanf(in, "%7s", kind) == 1;
    if (ok && strcmp(kind, "spi") == 0) {
        char port;
        unsigned mode, bit, rd_mask, wr_mask;
        ok = fscanf(in, "%u %u %u %c %u %x %x", &width, &autoinc, &mode, &port, &bit,
                    &rd_mask, &wr_mask) == 7 && mode < 4u && port >= 'B' && port <= 'D' &&
             bit < 8u && rd_mask < 256u && wr_mask < 256u && rd_mask != wr_mask;
        chip.spi = 1;
        chip.mode = (uint8_t)mode;
        chip.cs_port = port;
        chip.cs_bit = (uint8_t)bit;
        chip.read_mask = (uint8_t)rd_mask;
        chip.write_mask = (uint8_t)wr_mask;
    } else {
        ok = ok && strcmp(kind, "i2c") == 0 &&
             fscanf(in, "%x %u %u", &address, &width, &autoinc) == 3 && address <= 0x7Fu;
    }
    if (!ok || (width != 8u && width != 16u)) {
        fclose(in);
        snprintf(why, why_size, "the chip file %s does not start with `i2c ADDRESS WIDTH "
                 "AUTO_INCREMENT` or `spi WIDTH AUTO_INCREMENT MODE CS_PORT CS_BIT READ_MASK "
                 "WRITE_MASK`", path);
        return -1;
    }
    chip.address = (uint8_t)address;
    chip.addr_width = (uint8_t)width;
    chip.auto_increment = autoinc != 0;
    while (fscanf(in, "%x %x %x %x %x %x", &a, &r, &w, &rd, &wc, &rc) == 6 && a < 256u) {
        chip_reg_t *reg = &chip.regs[a];
        reg->present = 1;
        reg->value = reg->reset = (uint8_t)r;
        reg->writable = (uint8_t)w;
        reg->readable = (uint8_t)rd;
        reg->woclr = (uint8_t)wc;
        reg->rclr = (uint8_t)rc;
    }
    for (a = 0; a < 256u; a++)
        chip.wire_register[a] = (uint8_t)a;
    for (a = 0; a < 256u; a++)
        if (chip.regs[a].present)
            chip.wire_register[a & ~(chip.read_mask | chip.write_mask) & 0xFFu] = (uint8_t)a;
    fclose(in);
    return 0;
}

/* Attach the chip to the TWI, and pull SDA and SCL up (or hold SDA low: --i2c-fault
 * sda-low). */
static int attach_chip(avr_t *avr)
{
    static const char *names[2] = {"8>chip.out", "32<chip.in"};
    avr_ioport_external_t pulls;
    chip.avr = avr;
    chip.twi = find_twi(avr);
    if (!chip.twi)
        return -1;
    chip.irq = avr_alloc_irq(&avr->irq_pool, 0, 2, names);
    avr_irq_register_notify(chip.irq + TWI_IRQ_OUTPUT, on_twi, NULL);
    avr_connect_irq(avr_io_getirq(avr, AVR_IOCTL_TWI_GETIRQ(0), TWI_IRQ_OUTPUT),
                    chip.irq + TWI_IRQ_OUTPUT);
    avr_connect_irq(chip.irq + TWI_IRQ_INPUT,
                    avr_io_getirq(avr, AVR_IOCTL_TWI_GETIRQ(0), TWI_IRQ_INPUT));
    chip.sda = avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ('C'), 4);
    chip.scl = avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ('C'), 5);
    pulls.name = 'C';
    pulls.mask = (1u << 4) | (1u << 5);
    pulls.value = chip.fault == FAULT_SDA_LOW ? (1u << 5) : pulls.mask;
    avr_ioctl(avr, AVR_IOCTL_IOPORT_SET_EXTERNAL('C'), &pulls);
    avr_raise_irq(chip.sda, chip.fault == FAULT_SDA_LOW ? 0 : 1);
    avr_raise_irq(chip.scl, 1);
    return 0;
}

/* --- a simulated SPI chip on the SPI (--spi-chip FILE, --spi-fault KIND) -------------------
 *
 * The chip of a bridge image whose map puts it on SPI: the same registers as the I2C chip's
 * (FILE's first line "spi ADDR_WIDTH AUTO_INCREMENT MODE CS_PORT CS_BIT READ_MASK
 * WRITE_MASK"). It listens while its chip-select pin (CS_PORT, CS_BIT: the map's) is low;
 * each time the pin goes low a new transfer starts. The first byte (two with a 16-bit address
 * width) is the register address, whose READ_MASK | WRITE_MASK bits say a read (READ_MASK) or a
 * write (WRITE_MASK) and are no part of the address; each byte after it is written to the
 * register at the pointer (a write), or is answered with that register's value (a read);
 * the pointer steps after each when the chip auto-increments. The answer to a byte is raised
 * on the SPI's input as the byte ends (simavr 1.6 ends every byte 100 us after SPDR is
 * written, whatever the clock), which is when a real chip's MISO bits have all been shifted
 * in. A byte sent with SPCR's mode (CPOL, CPHA) other than MODE, or LSB first, is not
 * understood: the chip answers nothing and takes nothing, as a real one would misread it.
 *
 * --spi-fault KIND, one fault for the whole run:
 *   miso-high      no chip answers: every byte reads 0xFF (MISO floats high) and no write
 *                  lands (as a chip that is absent, unpowered or not selected)
 *   miso-low       MISO held low: every byte reads 0x00; writes land
 *   ignore-writes  the chip takes no write (MOSI open, or the chip write-protected); reads
 *                  are served
 */
static void on_spi(struct avr_irq_t *irq, uint32_t value, void *param)
{
    uint8_t in = (uint8_t)value, out = 0, rw = (uint8_t)(chip.read_mask | chip.write_mask);
    uint8_t spcr = chip.avr->data[chip.spi_io->r_spcr], width = chip.addr_width / 8u;
    (void)irq;
    (void)param;
    if (!chip.selected || ((spcr >> 2) & 3u) != chip.mode || (spcr & (1u << 5)))
        return; /* not selected, or another mode or bit order: nothing understood */
    if (chip.index < width) {
        if (chip.index == 0) {
            chip.writing = (in & rw) == chip.write_mask;
            chip.reading = (in & rw) == chip.read_mask;
            in = (uint8_t)(in & ~rw);
            if (width == 1u)
                in = chip.wire_register[in];
        }
        chip.pointer = (uint16_t)((chip.pointer << 8) | in);
        chip.index++;
    } else if (chip.writing) {
        if (chip.fault != FAULT_MISO_HIGH && chip.fault != FAULT_IGNORE_WRITES)
            chip_write(in);
        chip_step();
    } else if (chip.reading) {
        out = chip_read();
        chip_step();
    }
    if (chip.fault == FAULT_MISO_HIGH)
        out = 0xFFu;
    else if (chip.fault == FAULT_MISO_LOW)
        out = 0;
    avr_raise_irq(chip.irq + SPI_IRQ_INPUT, out);
}

/* The chip-select pin: low starts a transfer, high ends it. */
static void on_chip_select(struct avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq;
    (void)param;
    chip.selected = value == 0;
    chip.index = 0;
    chip.pointer = 0;
    chip.reading = chip.writing = 0;
}

/* Attach the SPI chip: the SPI's output (each byte the master sends) to the chip, the chip's
 * answers to the SPI's input, and the chip-select pin watched. */
static int attach_spi_chip(avr_t *avr)
{
    static const char *names[2] = {"8<spichip.in", "8>spichip.out"};
    avr_io_t *io;
    chip.avr = avr;
    for (io = avr->io_port; io; io = io->next)
        if (io->kind && strcmp(io->kind, "spi") == 0)
            chip.spi_io = (avr_spi_t *)io;
    if (!chip.spi_io)
        return -1;
    /* [SPI_IRQ_INPUT] is the chip's answer, [SPI_IRQ_OUTPUT] what it is sent */
    chip.irq = avr_alloc_irq(&avr->irq_pool, 0, 2, names);
    avr_irq_register_notify(chip.irq + SPI_IRQ_OUTPUT, on_spi, NULL);
    avr_connect_irq(avr_io_getirq(avr, AVR_IOCTL_SPI_GETIRQ(0), SPI_IRQ_OUTPUT),
                    chip.irq + SPI_IRQ_OUTPUT);
    avr_connect_irq(chip.irq + SPI_IRQ_INPUT,
                    avr_io_getirq(avr, AVR_IOCTL_SPI_GETIRQ(0), SPI_IRQ_INPUT));
    avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_IOPORT_GETIRQ(chip.cs_port),
                                          chip.cs_bit), on_chip_select, NULL);
    return 0;
}

static double seconds(clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    elf_firmware_t image;
    const char *path = NULL, *mcu = "atmega328p", *chip_path = NULL;
    unsigned long freq = 16000000UL, poll_us = 100;
    int stats = 0, i, port_fd, quiet_fd;
    struct sigaction action;
    avr_t *avr;
    uint32_t flags = 0;
    char what[4200];
    double wall0, cpu0;
    uint64_t cycle0;
    int state = cpu_Running, wanted = 0, spi_option = 0, fault_spi = 0;
    uint8_t id[REGDEV_EE_ID_BYTES];
    avr_eeprom_desc_t eeprom;
    char why[4300];

    if (argc > 0 && argv[0][0]) {
        const char *slash = strrchr(argv[0], '/');
        prog = slash ? slash + 1 : argv[0];
    }
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--link") == 0 && i + 1 < argc)
            link_path = argv[++i];
        else if (strcmp(argv[i], "--eeprom") == 0 && i + 1 < argc)
            eeprom_path = argv[++i];
        else if (strcmp(argv[i], "--id") == 0 && i + 1 < argc) {
            if (parse_id(argv[++i], id) < 0) {
                fprintf(stderr, "%s: error: --id: expected 8 upper-case hex digits 0-9 A-F "
                                "(what the EEPROM keeps), got `%s`\n", prog, argv[i]);
                return 2;
            }
            wanted = 1;
        } else if (strcmp(argv[i], "--mcu") == 0 && i + 1 < argc)
            mcu = argv[++i];
        else if (strcmp(argv[i], "--freq") == 0 && i + 1 < argc) {
            if (parse_number("--freq", "hertz", argv[++i], 1, MAX_FREQ, &freq) < 0)
                return 2;
        } else if (strcmp(argv[i], "--poll-us") == 0 && i + 1 < argc) {
            if (parse_number("--poll-us", "simulated microseconds", argv[++i], 0, MAX_POLL_US,
                             &poll_us) < 0)
                return 2;
        }
        else if (strcmp(argv[i], "--i2c-chip") == 0 && i + 1 < argc)
            chip_path = argv[++i];
        else if (strcmp(argv[i], "--spi-chip") == 0 && i + 1 < argc)
            chip_path = argv[++i], spi_option = 1;
        else if ((strcmp(argv[i], "--i2c-fault") == 0 || strcmp(argv[i], "--spi-fault") == 0)
                 && i + 1 < argc) {
            const char *kind = argv[++i];
            unsigned k, spi_fault = strcmp(argv[i - 1], "--spi-fault") == 0;
            for (k = spi_fault ? FIRST_SPI_FAULT : 1;
                 k < (spi_fault ? sizeof FAULTS / sizeof FAULTS[0] : FIRST_SPI_FAULT); k++)
                if (strcmp(kind, FAULTS[k]) == 0)
                    chip.fault = (uint8_t)k;
            if (!chip.fault) {
                fprintf(stderr, "%s: error: %s: expected %s, got `%s`\n", prog, argv[i - 1],
                        spi_fault ? "miso-high, miso-low or ignore-writes"
                                  : "nack-address, nack-data, arbitration, sda-low or stretch",
                        kind);
                return 2;
            }
            fault_spi = (int)spi_fault;
        }
        else if (strcmp(argv[i], "--stats") == 0)
            stats = 1;
        else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0)
            verbose = 1;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            path = NULL, i = argc + 1;
    }
    if (!path || i > argc) {
        fprintf(stderr, "usage: %s [--link PATH] [--eeprom FILE [--id ID]] [--stats] "
                        "[-v] [--poll-us N] [--mcu NAME] [--freq HZ] [--i2c-chip FILE "
                        "[--i2c-fault KIND]] [--spi-chip FILE [--spi-fault KIND]] IMAGE.elf\n",
                prog);
        return 2;
    }
    if (chip.fault && (!chip_path || fault_spi != spi_option)) {
        fprintf(stderr, "%s: error: --%s-fault needs --%s-chip FILE (the chip it is a fault "
                        "of)\n", prog, fault_spi ? "spi" : "i2c", fault_spi ? "spi" : "i2c");
        return 2;
    }
    if (wanted && !eeprom_path) {
        fprintf(stderr, "%s: error: --id needs --eeprom FILE (a board that keeps its id "
                        "keeps its start count, or a restart says old epochs again)\n", prog);
        return 2;
    }

    /* Keep standard output for the port alone. */
    port_fd = dup(STDOUT_FILENO);
    quiet_fd = verbose ? dup(STDERR_FILENO) : open("/dev/null", O_WRONLY);
    if (port_fd < 0 || quiet_fd < 0 || dup2(quiet_fd, STDOUT_FILENO) < 0)
        return fail("cannot set up standard output", strerror(errno));
    close(quiet_fd);
    avr_global_logger_set(quiet_logger);

    memset(&image, 0, sizeof image);
    {
        /* simavr's loader reports a bad file with perror and its logger: say it once here */
        char what[4200];
        int saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY), loaded;
        unsigned char header[20] = {0};
        FILE *probe = fopen(path, "rb");
        snprintf(what, sizeof what, "cannot load the image %s", path);
        if (!probe)
            return fail(what, strerror(errno));
        loaded = fread(header, 1, sizeof header, probe) == sizeof header;
        fclose(probe);
        /* an ELF file ("\x7fELF") for machine 83, EM_AVR (little-endian e_machine) */
        if (!loaded || memcmp(header, "\x7f" "ELF", 4) != 0 || header[18] != 83 || header[19])
            return fail(what, "not an AVR ELF image");
        if (saved >= 0 && null >= 0)
            dup2(null, STDERR_FILENO);
        loaded = elf_read_firmware(path, &image) == 0 && image.flash;
        if (saved >= 0 && null >= 0) {
            dup2(saved, STDERR_FILENO);
            close(saved);
            close(null);
        }
        if (!loaded)
            return fail(what, "not an AVR ELF image");
    }
    if (!image.mmcu[0])
        snprintf(image.mmcu, sizeof image.mmcu, "%s", mcu);
    if (!image.frequency)
        image.frequency = (uint32_t)freq;
    avr = avr_make_mcu_by_name(image.mmcu);
    if (!avr)
        return fail("simavr does not know this MCU", image.mmcu);
    avr_init(avr);
    avr->log = verbose ? LOG_WARNING : LOG_ERROR;
    avr_load_firmware(avr, &image);
    avr->frequency = image.frequency;
    memset(&eeprom, 0, sizeof eeprom);
    eeprom_size = avr->e2end + 1u;
    avr_ioctl(avr, AVR_IOCTL_EEPROM_GET, &eeprom); /* simavr 1.6 returns -1 even when done */
    if (!eeprom.ee || eeprom_size < 16u)
        return fail("cannot reach the EEPROM", image.mmcu);
    eeprom_live = eeprom.ee;
    eeprom_saved = malloc(eeprom_size);
    if (!eeprom_saved)
        return fail("cannot set up the EEPROM", strerror(errno));
    switch (setup_eeprom(eeprom_live, eeprom_size, wanted, id, why, sizeof why)) {
    case -1:
        fprintf(stderr, "%s: error: %s\n", prog, why);
        return 2;
    case 1: /* a new board: its file is written now */
        if (save_eeprom(1) < 0) {
            snprintf(why, sizeof why, "cannot write the EEPROM file %s", eeprom_path);
            return fail(why, strerror(errno));
        }
        break;
    default:
        memcpy(eeprom_saved, eeprom_live, eeprom_size);
    }
    if (eeprom_path) {
        /* every simulated millisecond: the start count the image writes at start is kept
         * before a host can have learnt the epoch it makes */
        eeprom_cycles = avr_usec_to_cycles(avr, 1000);
        avr_cycle_timer_register(avr, eeprom_cycles, poll_eeprom, NULL);
    }

    if (chip_path) {
        if (load_chip(chip_path, why, sizeof why) < 0) {
            fprintf(stderr, "%s: error: %s\n", prog, why);
            return 2;
        }
        if (chip.spi != spi_option) {
            fprintf(stderr, "%s: error: the chip file %s is of an %s chip: give it to --%s-chip"
                            "\n", prog, chip_path, chip.spi ? "SPI" : "I2C",
                    chip.spi ? "spi" : "i2c");
            return 2;
        }
        if (chip.spi ? attach_spi_chip(avr) < 0 : attach_chip(avr) < 0)
            return fail(chip.spi ? "this MCU has no SPI to attach the chip to"
                                 : "this MCU has no TWI to attach the chip to", image.mmcu);
    }
    uart0 = find_uart0(avr);
    uart_input = avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_INPUT);
    if (!uart0 || !uart_input)
        return fail("this MCU has no USART0 to bridge", image.mmcu);
    if (open_bridge() < 0)
        return fail("cannot open a pseudo-terminal", strerror(errno));
    avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUTPUT),
                            on_output, NULL);
    avr_ioctl(avr, AVR_IOCTL_UART_GET_FLAGS('0'), &flags);
    flags &= ~(uint32_t)(AVR_UART_FLAG_POLL_SLEEP | AVR_UART_FLAG_STDIO);
    avr_ioctl(avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);
    poll_cycles = avr_usec_to_cycles(avr, (uint32_t)(poll_us ? poll_us : 1000u));
    avr_cycle_timer_register(avr, poll_cycles, poll_bridge, NULL);
    if (link_path && own_link_make(&link_made, link_path, pty_name, why, sizeof why) < 0) {
        cleanup_links();
        snprintf(what, sizeof what, "cannot make the link %s", link_path);
        return fail(what, why);
    }

    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGHUP, &action, NULL);
    signal(SIGPIPE, SIG_IGN);

    {
        char line[320];
        int n = snprintf(line, sizeof line, "%s\n", link_path ? link_path : pty_name);
        if (write(port_fd, line, (size_t)n) != n) {
            int error = errno;
            cleanup_links();
            return fail("cannot write the port to standard output", strerror(error));
        }
        close(port_fd);
    }

    wall0 = seconds(CLOCK_MONOTONIC);
    cpu0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
    cycle0 = avr->cycle;
    while (!stop) {
        state = avr_run(avr);
        if (state == cpu_Done || state == cpu_Crashed)
            break;
    }
    cleanup_links();
    if (!eeprom_failed && save_eeprom(0) < 0)
        eeprom_failed = errno ? errno : EIO;
    if (eeprom_failed) {
        fprintf(stderr, "%s: error: cannot write the EEPROM file %s: %s\n", prog, eeprom_path,
                strerror(eeprom_failed));
        _exit(1);
    }
    if (stats) {
        double wall = seconds(CLOCK_MONOTONIC) - wall0;
        double cpu = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
        double cycles = (double)(avr->cycle - cycle0);
        fprintf(stderr, "%s: %.0f cycles (%.3f s at %u Hz) in %.3f s wall clock, %.3f s CPU "
                "(%.0f%% of one core): %.0f cycles per wall second (%.3fx real time)\n", prog,
                cycles, cycles / avr->frequency, avr->frequency, wall, cpu,
                wall > 0 ? 100.0 * cpu / wall : 0.0, wall > 0 ? cycles / wall : 0.0,
                wall > 0 ? cycles / avr->frequency / wall : 0.0);
    }
    if (verbose && chip_path)
        dump_chip();
    fflush(stdout); /* simavr's messages, with -v */
    fflush(stderr);
    if (state == cpu_Done || state == cpu_Crashed) {
        fprintf(stderr, "%s: error: the image %s at pc 0x%04x\n", prog,
                state == cpu_Done ? "stopped (slept with interrupts off)" : "crashed",
                (unsigned)avr->pc);
        _exit(1);
    }
    _exit(0);
}
