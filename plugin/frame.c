/* What stdin says, and the frame sent to the daemon. */
#include "frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LATEST_VERSION "1.1.0"
#define POD_ANNOTATIONS "io.kubernetes.cri.pod-annotations" /* runtimeConfig: dropped from a DEL */

static const char *const supported_versions[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The members of the JSON object data; false, and the problem, when data is not one
 * JSON object (invalid JSON, another kind of value, data after it). */
static bool object_members(struct bytes data, struct json_member **members, size_t *count,
			   struct buf *problem)
{
	size_t at;
	if (!json_check(data.p, data.len, problem, &at)) {
		if (at > 0) { /* where, and what is around it */
			size_t from = at > 16 ? at - 16 : 0, to = at + 16 < data.len ? at + 16 : data.len;
			buf_addf(problem, " at byte %zu, near `", at);
			buf_add(problem, data.p + from, to - from);
			buf_addc(problem, '`');
		}
		return false;
	}
	if (data.len == 0 || data.p[0] != '{') {
		buf_adds(problem, "not a JSON object");
		return false;
	}
	return json_object_members(data, members, count);
}

void conf_parse(struct conf *c, struct bytes in)
{
	size_t from = 0, to = in.len;
	while (from < to && is_space(in.p[from]))
		from++;
	while (to > from && is_space(in.p[to - 1]))
		to--;
	*c = (struct conf){.text = {in.p + from, to - from}};
	if (!json_utf8_valid(c->text.p, c->text.len)) {
		buf_adds(&c->problem, "not UTF-8");
		return;
	}
	object_members(c->text, &c->members, &c->count, &c->problem);
}

/* The JSON string value, or "" when it is not one (null, a number, absent). */
static void string_of(struct bytes value, struct buf *out)
{
	if (value.p != NULL && value.p[0] == '"')
		json_unquote(out, value);
}

void conf_version(const struct conf *c, struct buf *out)
{
	string_of(json_get(c->members, c->count, "cniVersion"), out);
	if (out->len == 0)
		buf_adds(out, LATEST_VERSION);
}

void conf_socket(const struct conf *c, const char *plugin, struct buf *out)
{
	struct json_member *section = c->members;
	size_t count = c->count;
	if (strcmp(plugin, "netctl-ipam") == 0) {
		struct bytes ipam = json_get(c->members, c->count, "ipam");
		if (ipam.p == NULL || ipam.p[0] != '{' ||
		    !json_object_members(ipam, &section, &count)) {
			section = NULL; /* no section, no "socket" */
			count = 0;
		}
	}
	string_of(json_get(section, count, "socket"), out);
	if (out->len == 0)
		buf_adds(out, DEFAULT_SOCKET);
}

static void encode_object(struct buf *out, const struct json_member *members, size_t count)
{
	buf_addc(out, '{');
	for (size_t i = 0; i < count; i++) {
		if (i > 0)
			buf_addc(out, ',');
		json_quote(out, buf_bytes(&members[i].key), false);
		buf_addc(out, ':');
		buf_add(out, members[i].value.p, members[i].value.len);
	}
	buf_addc(out, '}');
}

/* The object again without runtimeConfig[POD_ANNOTATIONS], every other value as written
 * (only the structure of the object and of runtimeConfig is written anew, keys
 * included); false when it has none. */
static bool without_pod_annotations(const struct conf *c, struct buf *out)
{
	bool changed = false;
	struct json_member *slim = must_alloc(calloc(c->count + 1, sizeof *slim));
	for (size_t i = 0; i < c->count; i++) {
		slim[i] = c->members[i];
		struct json_member *runtime;
		size_t n, kept = 0;
		if (!bytes_is(buf_bytes(&slim[i].key), "runtimeConfig") ||
		    slim[i].value.p[0] != '{' || !json_object_members(slim[i].value, &runtime, &n) ||
		    json_get(runtime, n, POD_ANNOTATIONS).p == NULL)
			continue;
		for (size_t j = 0; j < n; j++)
			if (!bytes_is(buf_bytes(&runtime[j].key), POD_ANNOTATIONS))
				runtime[kept++] = runtime[j];
		struct buf *value = must_alloc(calloc(1, sizeof *value));
		encode_object(value, runtime, kept);
		slim[i].value = buf_bytes(value);
		changed = true;
	}
	if (changed)
		encode_object(out, slim, c->count);
	return changed;
}

/* frame_body writes the frame's JSON: "proto", the request, and the network config. A
 * stdin that is a JSON object goes in verbatim as the raw value "config" (escaping it
 * into a string would make every \u003c, a "<" as the runtime's Go encoder writes it, 7
 * bytes); a DEL's leaves out
 * runtimeConfig[POD_ANNOTATIONS] (up to megabytes, and a DEL needs nothing of it). Any
 * other stdin, and one holding a \ud… escape (a UTF-16 surrogate, which the daemon's
 * decoder may refuse, and with it the whole frame), goes as the string "stdin". */
void frame_body(struct buf *out, const struct request *req, const struct conf *c,
		struct bytes stdin_)
{
	const struct {
		const char *name, *value;
	} fields[] = {
		{"command", req->command}, {"container_id", req->container_id},
		{"netns", req->netns}, {"ifname", req->ifname}, {"args", req->args},
		{"path", req->path}, {"plugin", req->plugin},
	};
	buf_addf(out, "{\"proto\":%d", PROTO);
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		buf_addf(out, ",\"%s\":", fields[i].name);
		json_quote(out, cbytes(fields[i].value), false);
	}
	bool valid = c->problem.len == 0;
	struct bytes text = c->text;
	struct buf slim = {0};
	if (valid && strcmp(req->command, "DEL") == 0 && without_pod_annotations(c, &slim))
		text = buf_bytes(&slim);
	if (valid && memmem(text.p, text.len, "\\ud", 3) == NULL &&
	    memmem(text.p, text.len, "\\uD", 3) == NULL) {
		buf_adds(out, ",\"config\":");
		buf_add(out, text.p, text.len);
	} else {
		if (!valid)
			text = stdin_; /* as it came, as the older plugin sent it */
		buf_adds(out, ",\"stdin\":");
		json_quote(out, text, false);
	}
	buf_addc(out, '}');
}

/* -- the reply ---------------------------------------------------------------------------- */

static const char *kind_of(char c)
{
	switch (c) {
	case '"':
		return "string";
	case '{':
		return "object";
	case '[':
		return "array";
	case 't':
	case 'f':
		return "bool";
	}
	return "number";
}

/* A JSON number that is an integer within 64 bits, as Go's strconv.ParseInt reads it. */
static bool integer(struct bytes v, long long *out)
{
	size_t i = v.p[0] == '-';
	uint64_t n = 0, limit = (uint64_t)INT64_MAX + (i == 1);
	for (; i < v.len; i++) {
		if (v.p[i] < '0' || v.p[i] > '9')
			return false; /* another kind of value, a fraction, an exponent */
		unsigned d = (unsigned)(v.p[i] - '0');
		if (n > (limit - d) / 10)
			return false;
		n = n * 10 + d;
	}
	*out = v.p[0] == '-' ? (long long)(0 - n) : (long long)n;
	return true;
}

/* The reply's members by name. A name matches whatever its case (as it did for Go's
 * decoder, which the daemon's answers were written for). */
static const char *const reply_fields[] = {"status", "output", "warning", "proto"};

static size_t reply_field(struct bytes key)
{
	size_t f = 0;
	for (; f < 4; f++)
		if (key.len == strlen(reply_fields[f]) &&
		    strncasecmp(key.p, reply_fields[f], key.len) == 0)
			break;
	return f;
}

bool reply_parse(struct reply *r, struct bytes data, struct buf *why)
{
	size_t at, i = 0;
	*r = (struct reply){0};
	if (!json_check(data.p, data.len, why, &at))
		return false;
	while (is_space(data.p[i]))
		i++;
	if (data.p[i] == 'n')
		return true; /* null: no member, the reply stays empty (as with Go's decoder) */
	struct json_member *members;
	size_t count;
	if (!json_object_members(data, &members, &count)) {
		buf_addf(why, "cannot unmarshal %s into the reply (an object)", kind_of(data.p[i]));
		return false;
	}
	/* each member in turn, the last of a name winning; unknown ones are ignored, and a
	 * null changes nothing */
	for (size_t m = 0; m < count; m++) {
		struct bytes v = members[m].value;
		size_t f = reply_field(buf_bytes(&members[m].key));
		if (f == 4 || v.p[0] == 'n')
			continue;
		bool number = f == 0 || f == 3;
		if (number && integer(v, f == 0 ? &r->status : &r->proto))
			continue;
		if (!number && v.p[0] == '"') {
			struct buf *s = f == 1 ? &r->output : &r->warning;
			s->len = 0;
			json_unquote(s, v);
			continue;
		}
		buf_addf(why, "cannot unmarshal %s", kind_of(v.p[0]));
		if (number && strcmp(kind_of(v.p[0]), "number") == 0) {
			buf_addc(why, ' '); /* the number itself: a fraction, an exponent, too large */
			buf_add(why, v.p, v.len);
		}
		buf_addf(why, " into the reply's \"%s\" (%s)", reply_fields[f],
			 number ? "an integer" : "a string");
		return false;
	}
	return true;
}

/* reply_refused: the daemon did not serve the frame, because its protocol is older than
 * the frame's. A daemon answers with "proto" less than the frame's only then; one older
 * than the field answers without it, and served the frame (it ignores fields it does not
 * know, and protocol 2 added only "proto"). */
bool reply_refused(const struct reply *r)
{
	return r->status != 0 && r->proto != 0 && r->proto < PROTO;
}

void cni_error(struct buf *out, struct bytes version, int code, struct bytes msg)
{
	buf_adds(out, "{\"cniVersion\":");
	json_quote(out, version, true);
	buf_addf(out, ",\"code\":%d,\"msg\":", code);
	json_quote(out, msg, true);
	buf_addc(out, '}');
}

void version_answer(struct buf *out, struct bytes version)
{
	buf_adds(out, "{\"cniVersion\":");
	json_quote(out, version, true);
	buf_adds(out, ",\"supportedVersions\":[");
	for (size_t i = 0; i < sizeof supported_versions / sizeof supported_versions[0]; i++)
		buf_addf(out, "%s\"%s\"", i ? "," : "", supported_versions[i]);
	buf_adds(out, "]}");
}
