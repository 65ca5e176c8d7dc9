/* The bridge's bus: the ATmega328P's TWI as an I2C master (docs/firmware.md, "A bridge to an
 * I2C chip"). Built only for a map with a bus (regmap.h's REGDEV_BUS_I2C); the core calls
 * regdev_bus_read and regdev_bus_write after its own checks.
 *
 * Every wait for the TWI is bounded (BOUND_US): a chip that holds SCL low longer (clock
 * stretching), or a bus that never frees, ends the transfer with an error, never a hang. A
 * transfer is: START, the chip's address (SLA+W), the register address (1 or 2 bytes), then
 * the data bytes (a write), or a repeated START, SLA+R and the bytes read, the last one not
 * acknowledged (a read); then STOP. Each byte's acknowledgement is checked: a write is done
 * only when the chip acknowledged every byte.
 *
 * Each step ends in the TWI interrupt, which sets a flag (and turns itself off), rather than
 * by polling TWINT: simavr 1.6 never clears TWINT once set (its TWI vector is "sticky"), so a
 * polled TWINT would say every step is done at once; the interrupt it does raise at the right
 * time. The main loop runs with interrupts on, as the chip needs.
 *
 * simavr 1.6 reports SLA+W as a data byte (status 28 or 30, not 18 or 20): the phase of the
 * transfer, not the status, says which byte the chip did not acknowledge.
 */
#include "regdev_core.h"

#ifdef REGDEV_BUS_I2C
#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/delay.h>
#include <util/twi.h>

/* How long the TWI may take for one step (a START, a byte) before the bridge gives up:
 * 25 ms, SMBus's clock-low timeout (at 100 kHz a byte takes 90 us). */
#define BOUND_US 25000UL
#define POLL_US 5u
#define SDA _BV(PC4)
#define SCL _BV(PC5)

/* The bit-rate register for REGDEV_BUS_CLOCK: SCL = F_CPU / (16 + 2 TWBR 4^TWPS). */
#define TWBR_1 ((F_CPU / REGDEV_BUS_CLOCK - 16UL) / 2UL)
#if TWBR_1 <= 255UL
#define TWBR_VALUE TWBR_1
#define TWPS_VALUE 0u
#else
#define TWBR_VALUE (TWBR_1 / 4UL)
#define TWPS_VALUE 1u
#endif

static uint8_t ready;
static volatile uint8_t done;

ISR(TWI_vect)
{
    done = 1;
    /* TWIE off, TWINT written 0 (which leaves it set and starts nothing): the next step
     * turns it on again */
    TWCR = (uint8_t)(TWCR & ~(_BV(TWIE) | _BV(TWINT)));
}

/* Why the TWI did not finish a step in time: a line still low after the bound is a stuck
 * bus when it is SDA, a clock held low (stretched) otherwise. */
static uint8_t timed_out(void)
{
    return (PINC & SDA) ? REGDEV_BUS_STRETCH : REGDEV_BUS_BUSLOW;
}

/* Start a step (TWCR's bits) and wait for its interrupt; the status (TW_STATUS), or 0xFF past the
 * bound. */
static uint8_t step(uint8_t bits)
{
    uint16_t polls = (uint16_t)(BOUND_US / POLL_US);
    done = 0;
    TWCR = (uint8_t)(bits | _BV(TWINT) | _BV(TWEN) | _BV(TWIE));
    while (!done) {
        if (!--polls)
            return 0xFFu;
        _delay_us(POLL_US);
    }
    return TW_STATUS;
}

/* Free the bus: a STOP (bounded), then the TWI off, so the next transfer starts afresh. */
static void finish(void)
{
    uint16_t polls = (uint16_t)(BOUND_US / POLL_US);
    TWCR = _BV(TWINT) | _BV(TWEN) | _BV(TWSTO);
    while ((TWCR & _BV(TWSTO)) && --polls)
        _delay_us(POLL_US);
    TWCR = 0;
}

/* START (or a repeated one) and the chip's address with `rw` (TW_READ, TW_WRITE). */
static uint8_t address(uint8_t rw)
{
    uint8_t status = step(_BV(TWSTA));
    if (status == 0xFFu)
        return timed_out();
    if (status == TW_MT_ARB_LOST)
        return REGDEV_BUS_ARBLOST;
    if (status != TW_START && status != TW_REP_START)
        return REGDEV_BUS_BUSLOW; /* a bus error (00): an illegal START or STOP on the bus */
    TWDR = (uint8_t)((REGDEV_BUS_ADDRESS << 1) | rw);
    status = step(0);
    switch (status) {
    case TW_MT_SLA_ACK: case TW_MT_DATA_ACK: case TW_MR_SLA_ACK:
        return REGDEV_BUS_OK;
    case TW_MT_SLA_NACK: case TW_MT_DATA_NACK: case TW_MR_SLA_NACK:
        return REGDEV_BUS_NOACK;
    case 0xFFu:
        return timed_out();
    case TW_MT_ARB_LOST:
        return REGDEV_BUS_ARBLOST;
    default:
        return REGDEV_BUS_BUSLOW;
    }
}

/* One byte to the chip, acknowledged. */
static uint8_t put(uint8_t byte)
{
    uint8_t status;
    TWDR = byte;
    status = step(0);
    if (status == TW_MT_DATA_ACK)
        return REGDEV_BUS_OK;
    if (status == TW_MT_DATA_NACK)
        return REGDEV_BUS_NACK;
    if (status == TW_MT_ARB_LOST)
        return REGDEV_BUS_ARBLOST;
    return status == 0xFFu ? timed_out() : REGDEV_BUS_BUSLOW;
}

/* START, SLA+W and the register address: the head of every transfer. A bus whose SDA or
 * SCL is low before the START is stuck (held by a chip, or a missing pull-up). */
static uint8_t head(uint8_t reg)
{
    uint8_t error;
    if (!ready) {
        PORTC |= SDA | SCL; /* the internal pull-ups (weak: fit 4.7 kOhm ones, docs) */
        TWSR = TWPS_VALUE;
        TWBR = (uint8_t)TWBR_VALUE;
        ready = 1;
    }
    if ((PINC & (SDA | SCL)) != (SDA | SCL))
        return REGDEV_BUS_BUSLOW;
    if ((error = address(TW_WRITE)) != 0)
        return error;
#if REGDEV_BUS_ADDR_WIDTH == 16
    if ((error = put(0)) != 0)
        return error;
#endif
    return put(reg);
}

/* `n` bytes from register `reg` up, in one burst (or one transfer each, for a chip without
 * auto-increment). */
static uint8_t read_burst(uint8_t reg, uint8_t *data, uint8_t n)
{
    uint8_t error = head(reg), status;
    if (!error)
        error = address(TW_READ);
    while (!error && n--) {
        status = step(n ? _BV(TWEA) : 0); /* the last byte is not acknowledged */
        if (status == TW_MR_DATA_ACK || status == TW_MR_DATA_NACK)
            *data++ = TWDR;
        else if (status == TW_MR_ARB_LOST)
            error = REGDEV_BUS_ARBLOST;
        else
            error = status == 0xFFu ? timed_out() : REGDEV_BUS_BUSLOW;
    }
    finish();
    return error;
}

static uint8_t write_burst(uint8_t reg, const uint8_t *data, uint8_t n)
{
    uint8_t error = head(reg);
    while (!error && n--)
        error = put(*data++);
    finish();
    return error;
}

uint8_t regdev_bus_read(uint8_t reg, uint8_t *data, uint8_t n)
{
#if REGDEV_BUS_AUTO_INCREMENT
    return read_burst(reg, data, n);
#else
    uint8_t error = 0;
    while (!error && n--)
        error = read_burst(reg++, data++, 1);
    return error;
#endif
}

uint8_t regdev_bus_write(uint8_t reg, const uint8_t *data, uint8_t n)
{
#if REGDEV_BUS_AUTO_INCREMENT
    return write_burst(reg, data, n);
#else
    uint8_t error = 0;
    while (!error && n--)
        error = write_burst(reg++, data++, 1);
    return error;
#endif
}
#else
typedef int regdev_no_bus; /* (ISO C: a translation unit declares something) */
#endif
