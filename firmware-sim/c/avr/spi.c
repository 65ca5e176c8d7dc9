/* The bridge's bus: the ATmega328P's SPI as a master (docs/firmware.md, "A bridge to an SPI
 * chip"). Built only for a map whose chip is on SPI (regmap.h's REGDEV_BUS_SPI); the core
 * calls regdev_bus_read and regdev_bus_write after its own checks.
 *
 * A transfer is: the chip select (the map's pin, REGDEV_SPI_CS_*) low, the register address
 * (one byte, or two with a 16-bit address width, high first) with the map's read or write
 * bits in its first byte (REGDEV_SPI_READ, REGDEV_SPI_WRITE: they replace the address's own
 * bits there), then the data bytes (a write), or as many bytes clocked out with 0x00 as are
 * read; then the chip select high. A burst keeps the chip selected throughout (no torn
 * multi-register values); a chip without auto-increment gets one transfer a register.
 *
 * SPI has no acknowledgement: the master makes the clock, so every transfer ends (within
 * 16 x 128 CPU cycles a byte), and a chip that is absent or not listening goes unnoticed by
 * the transfer itself. What the bridge can tell: MISO stuck. When every byte of a read came
 * back 0xFF (nothing drives MISO: the line floats high or is pulled up) or 0x00 (MISO held
 * low), and the map names an identity register (REGDEV_SPI_IDENTITY, whose id is neither),
 * the bridge reads that register: when it reads 0xFF or 0x00 too, the read is an error
 * (REGDEV_BUS_MISOHI, REGDEV_BUS_MISOLO), never a value. A write the chip did not take is
 * caught only by reading it back (the map's regdev_spi_verify: the core compares).
 */
#include "regdev_core.h"

#ifdef REGDEV_BUS_SPI
#include <avr/io.h>

/* SPCR's clock divider and SPSR's SPI2X for REGDEV_BUS_CLOCK: SCK = F_CPU / 2..128
 * (ATmega328P datasheet, table 19-5). The map model accepts only these clocks. */
#define DIVIDER (F_CPU / REGDEV_BUS_CLOCK)
#if DIVIDER == 2
#define SPR_BITS 0u
#define X2 1u
#elif DIVIDER == 4
#define SPR_BITS 0u
#define X2 0u
#elif DIVIDER == 8
#define SPR_BITS _BV(SPR0)
#define X2 1u
#elif DIVIDER == 16
#define SPR_BITS _BV(SPR0)
#define X2 0u
#elif DIVIDER == 32
#define SPR_BITS _BV(SPR1)
#define X2 1u
#elif DIVIDER == 64
#define SPR_BITS _BV(SPR1)
#define X2 0u
#elif DIVIDER == 128
#define SPR_BITS (_BV(SPR1) | _BV(SPR0))
#define X2 0u
#else
#error "REGDEV_BUS_CLOCK: the SPI clock must be F_CPU divided by 2, 4, 8, ... 128"
#endif

#define MOSI _BV(PB3)
#define SCK _BV(PB5)
#define SS _BV(PB2)
#define CS _BV(REGDEV_SPI_CS_BIT)
/* The bits of the first address byte that say read or write. */
#define RW_MASK (REGDEV_SPI_READ | REGDEV_SPI_WRITE)

static uint8_t ready;

/* The pins and the SPI, once: SS (PB2) an output whatever selects the chip (an SS input
 * pulled low would turn the SPI into a slave), the chip select high (idle), CPOL as the
 * mode's (SCK idles there). */
static void setup(void)
{
    REGDEV_SPI_CS_PORT |= CS;
    REGDEV_SPI_CS_DDR |= CS;
    DDRB |= (uint8_t)(MOSI | SCK | SS);
    SPCR = (uint8_t)(_BV(SPE) | _BV(MSTR) | (REGDEV_SPI_MODE << CPHA) | SPR_BITS);
    SPSR = X2 ? _BV(SPI2X) : 0u;
    ready = 1;
}

/* One byte out on MOSI, the byte shifted in from MISO at the same time back. */
static uint8_t exchange(uint8_t byte)
{
    SPDR = byte;
    loop_until_bit_is_set(SPSR, SPIF);
    return SPDR;
}

/* The chip selected, the register address with `rw` (REGDEV_SPI_READ or _WRITE) sent. */
static void head(uint8_t reg, uint8_t rw)
{
    if (!ready)
        setup();
    REGDEV_SPI_CS_PORT &= (uint8_t)~CS;
#if REGDEV_BUS_ADDR_WIDTH == 16
    exchange(rw);
    exchange(reg);
#else
    exchange((uint8_t)((reg & (uint8_t)~RW_MASK) | rw));
#endif
}

static void release(void)
{
    REGDEV_SPI_CS_PORT |= CS;
}

/* `n` bytes from register `reg` up, in one burst (the chip selected throughout), or one
 * transfer a register for a chip without auto-increment. */
static void transfer(uint8_t reg, uint8_t *data, uint8_t n, uint8_t write)
{
#if REGDEV_BUS_AUTO_INCREMENT
    head(reg, write ? REGDEV_SPI_WRITE : REGDEV_SPI_READ);
    while (n--) {
        uint8_t in = exchange(write ? *data : 0u);
        if (!write)
            *data = in;
        data++;
    }
    release();
#else
    while (n--) {
        head(reg++, write ? REGDEV_SPI_WRITE : REGDEV_SPI_READ);
        if (write)
            exchange(*data);
        else
            *data = exchange(0u);
        data++;
        release();
    }
#endif
}

uint8_t regdev_bus_read(uint8_t reg, uint8_t *data, uint8_t n)
{
#ifdef REGDEV_SPI_IDENTITY
    uint8_t i, all = 0xFFu, none = 0u, id;
#endif
    transfer(reg, data, n, 0);
#ifdef REGDEV_SPI_IDENTITY
    for (i = 0; i < n; i++) {
        all &= data[i];
        none |= data[i];
    }
    if (all != 0xFFu && none != 0u)
        return REGDEV_BUS_OK; /* both levels seen: MISO is not stuck */
    transfer(REGDEV_SPI_IDENTITY, &id, 1, 0);
    if (id == 0xFFu)
        return REGDEV_BUS_MISOHI;
    if (id == 0u)
        return REGDEV_BUS_MISOLO;
#endif
    return REGDEV_BUS_OK;
}

uint8_t regdev_bus_write(uint8_t reg, const uint8_t *data, uint8_t n)
{
    transfer(reg, (uint8_t *)(uintptr_t)data, n, 1);
    return REGDEV_BUS_OK;
}
#else
typedef int regdev_no_spi; /* (ISO C: a translation unit declares something) */
#endif
