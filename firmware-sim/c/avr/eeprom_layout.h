/* What the Uno keeps in EEPROM: who it is and how many times it started (docs/firmware.md).
 *
 *     address 0..3   the magic 52 44 76 31 ("RDv1"): the two below are set
 *             4..7   the device id, 4 bytes, said as 8 upper-case hex digits, byte 4 first
 *             8..9   the start count, 16 bits, little-endian
 *
 * Anything else there (an erased chip's FF, another sketch's data) has no magic: the firmware
 * then draws an id, sets the count to 0 and writes the magic last. avr/main.c and the simavr
 * harness (which programs an id into a new simulated EEPROM) share this layout.
 */
#ifndef REGDEV_EEPROM_LAYOUT_H
#define REGDEV_EEPROM_LAYOUT_H

#define REGDEV_EE_MAGIC 0x31764452UL /* "RDv1" as a little-endian 32-bit word */
#define REGDEV_EE_MAGIC_AT 0u
#define REGDEV_EE_ID_AT 4u
#define REGDEV_EE_ID_BYTES 4u
#define REGDEV_EE_STARTS_AT 8u
#define REGDEV_EE_USED 10u

#endif
