/* What main.c needs beyond the C library's calls, done as the Go plugin did it (with Go's
 * standard library), so that paths and messages stay the same: path names cleaned as
 * Go's path/filepath does, system errors and durations worded as Go words them, and
 * NETCTL_REPLY_TIMEOUT read as Go's strconv.ParseFloat reads a number. */
#ifndef NETCTL_SYS_H
#define NETCTL_SYS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

/* The system error e as Go's syscall.Errno says it ("connection refused"). */
const char *errno_text(int e);

/* path's shortest equivalent by lexical processing ("a//b/../c" is "a/c"). */
void path_clean(struct buf *out, struct bytes path);
/* All but path's last element, cleaned ("." when it has one element). */
void path_dir(struct buf *out, struct bytes path);
/* path's last element ("." for "", "/" for slashes only). */
void path_base(struct buf *out, const char *path);
/* dir and name joined by a slash, cleaned. */
void path_join(struct buf *out, struct bytes dir, const char *name);

/* d nanoseconds as Go prints a time.Duration: "2s", "5m0s", "1.5s", "250ms". */
void duration_text(struct buf *out, int64_t d);

/* s as a number, if it is one by Go's syntax (decimal or hexadecimal, underscores
 * between digits, Inf, NaN) and within range; false otherwise. */
bool parse_float(const char *s, double *out);

#endif
