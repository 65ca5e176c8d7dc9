/* The C firmware on an ATmega328P (Arduino Uno): USART0 at 115200 baud 8N1, the core.
 *
 * Bytes are received by the USART's RX interrupt into a ring buffer; the main loop feeds
 * them to the core and sends each reply with the transmitter polled (a reply is at most 64
 * bytes, 5.6 ms at 115200 baud, while the ring keeps receiving). With nothing to do the CPU
 * sleeps in idle mode (the USART runs on; its RX interrupt wakes it). No Arduino core: flash
 * it with avrdude (docs/firmware.md).
 *
 * Who it is and when it last started over (docs/protocol.md): its id is kept in EEPROM, and
 * so is a count of its starts, incremented at every start before the first reply; the core
 * counts the resets (Z) since. The identify text says "id=<8 hex digits> epoch=BBBBRRRR". A
 * chip whose EEPROM holds no id (eeprom_layout.h) draws one at its first start, from the
 * jitter between the watchdog's own oscillator and the crystal (about a second, once).
 */
#include <avr/eeprom.h>
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
#include <avr/wdt.h>
#include <stdint.h>

#include "eeprom_layout.h"
#include "regdev_core.h"

#define BAUD 115200UL
/* At 16 MHz, 115200 baud is UBRR 16 with U2X0: 117647 baud, 2.1 % fast, as the Arduino core
 * runs it (the Uno's USB chip, on the same 16 MHz, makes the same baud rate). */
#define BAUD_TOL 3
#include <util/setbaud.h>

/* The receive ring: written by the RX interrupt only (head), read by the main loop only
 * (tail); one-byte indexes, so either side reads the other's index atomically. */
#define RX_SIZE 128u
#define RX_MASK (RX_SIZE - 1u)
static volatile uint8_t rx_ring[RX_SIZE];
static volatile uint8_t rx_head, rx_tail;

static regdev_core_t core;

ISR(USART_RX_vect)
{
    uint8_t byte = UDR0;
    uint8_t next = (uint8_t)((rx_head + 1u) & RX_MASK);
    /* A full ring drops the byte, as a UART overrun would: the frame it belonged to fails its
     * checks and is answered e SYNTAX or e CKSUM (docs/protocol.md). */
    if (next != rx_tail) {
        rx_ring[rx_head] = byte;
        rx_head = next;
    }
}

/* --- who it is: the id and the start count in EEPROM ------------------------------------- */

#define EE_BYTE(at) ((uint8_t *)(uintptr_t)(at))
#define EE_WORD(at) ((uint16_t *)(uintptr_t)(at))

#ifndef REGDEV_BUS
static volatile uint8_t jitter, jitter_fresh;

ISR(WDT_vect)
{
    jitter = TCNT1L;
    jitter_fresh = 1;
    /* The chip keeps WDIE in interrupt mode; simavr 1.6 clears it as the interrupt is taken
     * (as the chip does only in interrupt-and-reset mode): set it again. */
    WDTCSR |= _BV(WDIE);
}

/* 4 bytes drawn from Timer 1 (at the CPU clock, from the crystal) read at 64 watchdog
 * interrupts (every 16 ms, from the watchdog's own 128 kHz RC oscillator): how many cycles
 * each interval takes jitters, and the low bits of the count with it. Each byte takes 16
 * samples, rotated one bit between them. */
static void draw_id(uint8_t id[REGDEV_EE_ID_BYTES])
{
    uint8_t i;
    TCCR1B = _BV(CS10);
    cli();
    wdt_reset();
    WDTCSR = _BV(WDCE) | _BV(WDE);
    WDTCSR = _BV(WDIE); /* interrupt only, no reset; 16 ms */
    sei();
    for (i = 0; i < 64u; i++) {
        uint8_t *byte = &id[i & (REGDEV_EE_ID_BYTES - 1u)];
        while (!jitter_fresh)
            ;
        jitter_fresh = 0;
        *byte = (uint8_t)(((*byte << 1) | (*byte >> 7)) ^ jitter);
    }
    wdt_disable();
    TCCR1B = 0;
}

/* The id (as 8 hex digits into `text`) and this start's count, made new in EEPROM. */
static uint16_t start_count(char text[2u * REGDEV_EE_ID_BYTES + 1u])
{
    uint8_t id[REGDEV_EE_ID_BYTES] = {0, 0, 0, 0}, i;
    uint16_t starts;
    if (eeprom_read_dword((const uint32_t *)(uintptr_t)REGDEV_EE_MAGIC_AT) != REGDEV_EE_MAGIC) {
        draw_id(id);
        eeprom_update_block(id, EE_BYTE(REGDEV_EE_ID_AT), sizeof id);
        eeprom_update_word(EE_WORD(REGDEV_EE_STARTS_AT), 0);
        eeprom_update_dword((uint32_t *)(uintptr_t)REGDEV_EE_MAGIC_AT, REGDEV_EE_MAGIC);
    }
    eeprom_read_block(id, EE_BYTE(REGDEV_EE_ID_AT), sizeof id);
    for (i = 0; i < 2u * REGDEV_EE_ID_BYTES; i++) {
        uint8_t nibble = (uint8_t)((i & 1u) ? id[i >> 1] & 15u : id[i >> 1] >> 4);
        text[i] = (char)(nibble < 10u ? '0' + nibble : 'A' - 10 + nibble);
    }
    text[2u * REGDEV_EE_ID_BYTES] = 0;
    starts = (uint16_t)(eeprom_read_word(EE_WORD(REGDEV_EE_STARTS_AT)) + 1u);
    eeprom_update_word(EE_WORD(REGDEV_EE_STARTS_AT), starts);
    return starts;
}

#endif

/* The core's new start count, when its reset count passed FFFF. */
uint16_t regdev_core_next_start(uint16_t starts)
{
    starts = (uint16_t)(starts + 1u);
    eeprom_update_word(EE_WORD(REGDEV_EE_STARTS_AT), starts);
    return starts;
}

/* --- the line ------------------------------------------------------------------------------ */

static void usart_init(void)
{
    /* UCSR0A (U2X0) before UBRR0: simavr 1.6 takes the bit time from U2X0 as it is when UBRR0L
     * is written (the Arduino core sets them in this order too). */
#if USE_2X
    UCSR0A = _BV(U2X0);
#else
    UCSR0A = 0;
#endif
    UBRR0H = UBRRH_VALUE;
    UBRR0L = UBRRL_VALUE;
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00); /* 8N1 */
    UCSR0B = _BV(RXCIE0) | _BV(RXEN0) | _BV(TXEN0);
}

static void send(const uint8_t *data, uint8_t n)
{
    while (n--) {
        loop_until_bit_is_set(UCSR0A, UDRE0);
        UDR0 = *data++;
    }
}

int main(void)
{
#ifndef REGDEV_BUS
    char id[2u * REGDEV_EE_ID_BYTES + 1u];
    uint16_t starts;
#endif
    MCUSR = 0; /* a watchdog reset (a bootloader's way to start the sketch) leaves it on */
    wdt_disable();
    usart_init(); /* receiving from now on: a frame sent meanwhile waits in the ring */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion" /* avr-libc's macro, on a uint8_t register */
    set_sleep_mode(SLEEP_MODE_IDLE);
#pragma GCC diagnostic pop
    sei();
#ifdef REGDEV_BUS
    /* A bridge says no id and so no epoch: its reset epoch would cover the bridge, not the
     * chip, whose resets it cannot see; so regdev never replays a write to it. */
    regdev_core_init(&core, 0, 0);
#else
    starts = start_count(id); /* before the first reply */
    regdev_core_init(&core, id, starts);
#endif
    for (;;) {
        uint8_t byte, n;
        cli();
        if (rx_tail == rx_head) {
            /* Nothing to do: sleep. `sei` then `sleep` lets no interrupt in between, so a byte
             * that came after the test above wakes the CPU instead of waiting for the next. */
            sleep_enable();
            sei();
            sleep_cpu();
            sleep_disable();
            continue;
        }
        sei();
        byte = rx_ring[rx_tail];
        rx_tail = (uint8_t)((rx_tail + 1u) & RX_MASK);
        n = regdev_core_feed(&core, byte);
        if (n)
            send(core.reply, n);
    }
}
