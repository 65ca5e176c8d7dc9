/* The core as a shared object for tests (tests/test_firmware_c.py drives it with ctypes):
 * whole byte strings in, every reply out, in one call. */
#include <stddef.h>
#include <string.h>

#include "regdev_core.h"

/* How many times the core asked for a new start count (regdev_core_next_start). */
unsigned long regdev_test_next_starts;

/* The platform's new start count after `starts`: one more (a test has no EEPROM). */
uint16_t regdev_core_next_start(uint16_t starts)
{
    regdev_test_next_starts++;
    return (uint16_t)(starts + 1u);
}

/* sizeof(regdev_core_t), for a caller that allocates it. */
size_t regdev_test_core_size(void)
{
    return sizeof(regdev_core_t);
}

/* Feed n bytes; append the replies to out (at most cap bytes). Returns the bytes written, or
 * -1 when out is too small. */
long regdev_test_feed_all(regdev_core_t *core, const uint8_t *in, size_t n, uint8_t *out,
                          size_t cap)
{
    size_t used = 0, i;
    for (i = 0; i < n; i++) {
        uint8_t length = regdev_core_feed(core, in[i]);
        if (used + length > cap)
            return -1;
        memcpy(out + used, core->reply, length);
        used += length;
    }
    return (long)used;
}

/* How many registers the map has. */
size_t regdev_test_register_count(void)
{
    return REGDEV_REGISTER_COUNT;
}

/* The registers as they are held, in address order (write-only bits included, for
 * white-box checks). */
void regdev_test_registers(const regdev_core_t *core, uint8_t out[REGDEV_REGISTER_COUNT])
{
    memcpy(out, core->regs, REGDEV_REGISTER_COUNT);
}

/* The identify text's description, as compiled in. */
const char *regdev_test_identity(void)
{
    return regdev_identity;
}
