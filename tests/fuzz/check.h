/* What the fuzz targets assert beyond the sanitizers: a property that does not hold is a
 * finding, reported by libFuzzer with its input (an abort, as a crash). */
#ifndef NETCTL_FUZZ_CHECK_H
#define NETCTL_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: does not hold: %s\n", __FILE__, __LINE__, \
				#cond);                                               \
			abort();                                                      \
		}                                                                     \
	} while (0)

#endif
