/* Parsing of limit values shared by every shim ("4g", "512m", "1073741824"). */
#include <ctype.h>
#include <stdlib.h>

#include "hami_region.h"

int hami_parse_bytes(const char *text, uint64_t *out) {
    if (!text) return -1;
    while (isspace((unsigned char)*text)) text++;
    if (!isdigit((unsigned char)*text)) return -1;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    case 't': shift = 40; end++; break;
    default: break;
    }
    /* HAMi-core accepts "1024m"; also tolerate "1024Mi", "1024MB", "1024MiB". */
    if (shift && tolower((unsigned char)*end) == 'i') end++;
    if (tolower((unsigned char)*end) == 'b') end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    if (shift && v > (~0ull >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}
