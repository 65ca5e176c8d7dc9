/* Where the firmware's constant tables live, and how they are read.
 *
 * On an AVR, constants in RAM would cost RAM (the ATmega328P has 2 KiB), so the tables go to
 * flash (PROGMEM) and are read with pgm_read_byte and memcpy_P. Anywhere else they are plain
 * const data. This is the only place the portable core knows about a platform.
 */
#ifndef REGDEV_ROM_H
#define REGDEV_ROM_H

#include <stdint.h>

#if defined(__AVR__)
#include <avr/pgmspace.h>
#define REGDEV_ROM PROGMEM
#define REGDEV_ROM_BYTE(p) pgm_read_byte(p)
#define REGDEV_ROM_COPY(dst, src, n) memcpy_P((dst), (src), (n))
#else
#include <string.h>
#define REGDEV_ROM
#define REGDEV_ROM_BYTE(p) (*(const uint8_t *)(p))
#define REGDEV_ROM_COPY(dst, src, n) memcpy((dst), (src), (n))
#endif

#endif
