/* The pure half of the plugin: what stdin says, the frame sent to the daemon, the
 * daemon's answer, and the answers the plugin gives itself. */
#ifndef NETCTL_FRAME_H
#define NETCTL_FRAME_H

#include <stdbool.h>

#include "buf.h"
#include "json.h"

/* The frame protocol this plugin speaks: the frame's "proto". A frame without one is
 * version 1 (the Python plugin's: the same fields). A daemon answers a frame of a
 * protocol newer than its own with an error and its own "proto" (see reply_refused). */
#define PROTO 2

#define DEFAULT_SOCKET "/run/netctl/netctl.sock"

/* stdin read as a network config: its members in order, or why it is not one. */
struct conf {
	struct bytes text;           /* stdin without the JSON whitespace around it */
	struct json_member *members; /* none when problem is set */
	size_t count;
	struct buf problem;          /* why stdin is not a JSON object (empty when it is one) */
};

void conf_parse(struct conf *c, struct bytes stdin_);
/* The config's cniVersion, for the plugin's own answers; the latest when none. */
void conf_version(const struct conf *c, struct buf *out);
/* The daemon's socket: "socket" of the config (of its "ipam" section when the plugin runs
 * as netctl-ipam), else the default. */
void conf_socket(const struct conf *c, const char *plugin, struct buf *out);

/* The frame's fields taken from the environment, in the daemon's names. */
struct request {
	const char *command, *container_id, *netns, *ifname, *args, *path, *plugin;
};

void frame_body(struct buf *out, const struct request *req, const struct conf *c,
		struct bytes stdin_);

/* The daemon's answer frame. */
struct reply {
	long long status;
	struct buf output, warning;
	long long proto; /* the daemon's protocol; 0 from a daemon older than it */
};

/* data (the answer frame's JSON) read into r; false and why when it is not a reply. */
bool reply_parse(struct reply *r, struct bytes data, struct buf *why);
bool reply_refused(const struct reply *r);

/* The spec's error JSON, on one line. */
void cni_error(struct buf *out, struct bytes version, int code, struct bytes msg);
/* VERSION's result. */
void version_answer(struct buf *out, struct bytes version);

#endif
