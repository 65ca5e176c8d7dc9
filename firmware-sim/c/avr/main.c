/* The C firmware on an ATmega328P (Arduino Uno): USART0 at 115200 baud 8N1, the core.
 *
 * Bytes are received by the USART's RX interrupt into a ring buffer; the main loop feeds
 * them to the core and sends each reply with the transmitter polled (a reply is at most 64
 * bytes, 5.6 ms at 115200 baud, while the ring keeps receiving). With nothing to do the CPU
 * sleeps in idle mode (the USART runs on; its RX interrupt wakes it). No Arduino core, no
 * timers: flash it with avrdude (docs/firmware.md).
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
#include <avr/wdt.h>
#include <stdint.h>

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
    MCUSR = 0; /* a watchdog reset (a bootloader's way to start the sketch) leaves it on */
    wdt_disable();
    regdev_core_init(&core);
    usart_init();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion" /* avr-libc's macro, on a uint8_t register */
    set_sleep_mode(SLEEP_MODE_IDLE);
#pragma GCC diagnostic pop
    sei();
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
