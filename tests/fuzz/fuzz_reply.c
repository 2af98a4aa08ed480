/* libFuzzer target: the daemon's answer frame as the plugin reads it (plugin/frame.c's
 * reply_parse, given the frame's bytes exactly as plugin/main.c's exchange() read them
 * off the socket), then what main.c makes of it. Besides the sanitizers' reports, what
 * must hold: an answer is read only when it is valid JSON, and then its output and
 * warning are UTF-8; otherwise there is a reason, UTF-8 too, and the CNI error that
 * carries it (code 11) is valid JSON. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bytes in = {size ? (const char *)data : "", size};
	struct buf why = {0}, problem = {0}, out = {0};
	struct reply r;
	size_t at;
	bool json = json_check(in.p, in.len, &problem, &at);
	if (reply_parse(&r, in, &why)) {
		CHECK(json && why.len == 0);
		CHECK(json_utf8_valid(r.output.p, r.output.len));
		CHECK(json_utf8_valid(r.warning.p, r.warning.len));
		(void)reply_refused(&r);
		buf_addc(&r.output, '\n'); /* as main.c prints it */
	} else {
		CHECK(why.len > 0 && json_utf8_valid(why.p, why.len));
		struct buf msg = {0};
		buf_adds(&msg, "netctl daemon at /run/netctl/netctl.sock gave no answer (the "
			       "answer is not the daemon's JSON: ");
		buf_add(&msg, why.p, why.len);
		buf_adds(&msg, "); try again later");
		cni_error(&out, cbytes("1.0.0"), 11, buf_bytes(&msg));
		problem.len = 0;
		CHECK(json_check(out.p, out.len, &problem, &at));
	}
	arena_release(size);
	return 0;
}
