/* libFuzzer target: the frame the plugin sends (plugin/frame.c): stdin read as a network
 * config (conf_parse, conf_version, conf_socket), the request's fields, and the frame's
 * JSON (frame_body), with the answers the plugin gives itself (version_answer, cni_error).
 *
 * The input: one byte choosing the command (its low 3 bits) and the executable's name
 * (bit 3: netctl-ipam, else netctl-cni); then CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME,
 * CNI_ARGS and CNI_PATH, each ended by a NUL (environment variables hold none; those
 * missing are empty); the rest is stdin (tests/fuzz/corpus.py writes seeds so).
 *
 * Besides the sanitizers' reports, what must hold, since the daemon must be able to read
 * every frame: the frame is valid JSON and UTF-8, an object of the 8 fields in order and
 * then "config" or "stdin"; each field is its variable again (when that is UTF-8);
 * "config" is stdin as written (without the JSON whitespace around it) for any command
 * but DEL, and for a DEL the same less runtimeConfig's pod annotations; "stdin" is stdin
 * (when UTF-8). The config's version and socket are never empty, and the plugin's own
 * answers are valid JSON. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "frame.h"

#define POD_ANNOTATIONS "io.kubernetes.cri.pod-annotations"

static const char *const commands[] = {"ADD", "DEL", "CHECK", "VERSION",
				       "GC", "STATUS", "", "del"};

static bool same(struct bytes a, struct bytes b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static bool valid(struct bytes s)
{
	struct buf why = {0};
	size_t at;
	return json_check(s.p, s.len, &why, &at);
}

/* The string member value v is s again (when s is UTF-8: else its bytes were replaced). */
static void says(struct bytes v, struct bytes s)
{
	struct buf u = {0};
	CHECK(v.p[0] == '"');
	json_unquote(&u, v);
	if (json_utf8_valid(s.p, s.len))
		CHECK(same(buf_bytes(&u), s));
}

/* No runtimeConfig object of the config holds the pod's annotations. */
static void slimmed(struct bytes config)
{
	struct json_member *m, *rc;
	size_t n, k;
	CHECK(json_object_members(config, &m, &n));
	for (size_t i = 0; i < n; i++)
		if (bytes_is(buf_bytes(&m[i].key), "runtimeConfig") && m[i].value.p[0] == '{') {
			CHECK(json_object_members(m[i].value, &rc, &k));
			CHECK(json_get(rc, k, POD_ANNOTATIONS).p == NULL);
		}
}

/* Whether the config holds the pod's annotations in a runtimeConfig object. */
static bool annotated(const struct conf *c)
{
	struct json_member *rc;
	size_t k;
	for (size_t i = 0; i < c->count; i++)
		if (bytes_is(buf_bytes(&c->members[i].key), "runtimeConfig") &&
		    c->members[i].value.p[0] == '{' &&
		    json_object_members(c->members[i].value, &rc, &k) &&
		    json_get(rc, k, POD_ANNOTATIONS).p != NULL)
			return true;
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *p = (const char *)data + 1, *end = (const char *)data + size;
	struct buf fields[5] = {{0}};
	for (int f = 0; f < 5 && p < end; f++) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));
		size_t len = nul ? (size_t)(nul - p) : (size_t)(end - p);
		buf_add(&fields[f], p, len);
		p += len + (nul != NULL);
	}
	struct bytes stdin_ = {p < end ? p : "", (size_t)(end - p)};
	struct request req = {
		.command = commands[data[0] & 7], .container_id = buf_str(&fields[0]),
		.netns = buf_str(&fields[1]), .ifname = buf_str(&fields[2]),
		.args = buf_str(&fields[3]), .path = buf_str(&fields[4]),
		.plugin = data[0] & 8 ? "netctl-ipam" : "netctl-cni",
	};

	struct conf c;
	struct buf version = {0}, socket = {0}, out = {0};
	conf_parse(&c, stdin_);
	CHECK(c.problem.len == 0 || c.count == 0);
	conf_version(&c, &version);
	conf_socket(&c, req.plugin, &socket);
	CHECK(version.len > 0 && socket.len > 0);

	frame_body(&out, &req, &c, stdin_);
	struct bytes body = buf_bytes(&out);
	CHECK(valid(body) && json_utf8_valid(body.p, body.len));
	struct json_member *m;
	size_t n;
	CHECK(json_object_members(body, &m, &n) && n == 9);
	static const char *const names[] = {"proto", "command", "container_id", "netns",
					    "ifname", "args", "path", "plugin"};
	for (size_t i = 0; i < 8; i++)
		CHECK(bytes_is(buf_bytes(&m[i].key), names[i]));
	CHECK(bytes_is(m[0].value, "2"));
	const char *values[] = {req.command, req.container_id, req.netns, req.ifname,
				req.args, req.path, req.plugin};
	for (size_t i = 0; i < 7; i++)
		says(m[i + 1].value, cbytes(values[i]));
	struct bytes last = m[8].value;
	bool del = strcmp(req.command, "DEL") == 0;
	if (bytes_is(buf_bytes(&m[8].key), "config")) {
		CHECK(c.problem.len == 0);
		if (!del || !annotated(&c))
			CHECK(same(last, c.text));
		else
			slimmed(last);
	} else {
		CHECK(bytes_is(buf_bytes(&m[8].key), "stdin"));
		if (c.problem.len > 0)
			says(last, stdin_);
	}

	/* the answers the plugin gives itself */
	out.len = 0;
	version_answer(&out, buf_bytes(&version));
	CHECK(valid(buf_bytes(&out)));
	out.len = 0;
	cni_error(&out, buf_bytes(&version), 6, buf_bytes(c.problem.len ? &c.problem : &socket));
	CHECK(valid(buf_bytes(&out)));
	arena_release(size);
	return 0;
}
