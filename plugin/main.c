/* netctl-cni is netctl's thin CNI plugin, installed by `netctl install-cni` as two
 * executables: netctl-cni (the meta-plugin type) and netctl-ipam (the IPAM type); it knows
 * which it is by the name it was run by (argv[0]).
 *
 * The runtime execs it once per pod sandbox, so it does as little as it can: read the
 * CNI_* variables and stdin, make CNI_NETNS absolute, send one frame to the daemon's Unix
 * socket ("socket" in the network config, in its "ipam" section when run as
 * netctl-ipam; default /run/netctl/netctl.sock), print the answer, exit 0 or 1. The
 * frame, both ways: a 4-byte big-endian length, then that many bytes of JSON (frame.c
 * says what goes in). It is C with the C library only, linked statically: an executable
 * that needs nothing of the host (no shared libc, no interpreter), with no runtime to
 * start (the Go plugin before it spent about 2 ms of CPU per exec on its runtime's
 * threads).
 *
 *   - VERSION is answered here, without the daemon; so is a stdin that is not a JSON
 *     object (code 6): it cannot say which socket to use.
 *   - Daemon unreachable: ADD and CHECK fail at once with code 11 (try again later);
 *     STATUS with code 50; DEL writes its frame to a durable record in pending-del/
 *     beside the socket (a temporary name, fsynced, renamed, the directory fsynced, so a
 *     record is whole or absent) and exits 0 with a warning: the daemon finishes
 *     recorded DELs in its start-up replay, before it serves. A DEL that cannot even be
 *     recorded exits 1 (code 11), so the runtime retries it.
 *   - A daemon that refuses the frame's protocol (older than this plugin, during a
 *     rolling upgrade): its error is printed (code 11), and a DEL is recorded as when the
 *     daemon is down, for the upgraded daemon's start-up replay.
 *
 * The reply may take as long as the daemon's work (NETCTL_REPLY_TIMEOUT seconds,
 * default 300); connecting gives up after 2 seconds.
 *
 * Messages and paths are the Go plugin's, word for word where they came from Go's
 * standard library too (sys.c, and json.c's validation): the daemon, the tests and the
 * operators' searches saw those. The process is short-lived: nothing is freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "frame.h"
#include "sys.h"

#define PENDING_DIR "pending-del" /* beside the socket: DELs recorded for the daemon */
#define SECOND INT64_C(1000000000)
#define CONNECT_TIMEOUT (2 * SECOND)
#define DEFAULT_REPLY (300 * SECOND)
#define MAX_REPLY (64u << 20) /* a larger reply frame is not the daemon's */

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v != NULL ? v : "";
}

/* -- stdin, stdout, stderr ---------------------------------------------------------------- */

/* Wait until fd is ready for events: for a non-blocking pipe the runtime handed over. */
static void await(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
}

/* All of stdin; nothing when it cannot be read. */
static struct bytes read_stdin(void)
{
	static struct buf in;
	char chunk[65536];
	for (;;) {
		ssize_t n = read(0, chunk, sizeof chunk);
		if (n > 0) {
			buf_add(&in, chunk, (size_t)n);
		} else if (n == 0) {
			break;
		} else if (errno == EAGAIN) {
			await(0, POLLIN);
		} else if (errno != EINTR) {
			in.len = 0;
			break;
		}
	}
	return (struct bytes){buf_str(&in), in.len};
}

/* All of p to fd, waiting while a non-blocking pipe is full; a failure ends it silently
 * (stdout and stderr are where the plugin would report it). */
static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w >= 0) {
			p += w;
			n -= (size_t)w;
		} else if (errno == EAGAIN) {
			await(fd, POLLOUT);
		} else if (errno != EINTR) {
			return;
		}
	}
}

static int fail(struct bytes version, int code, struct bytes msg)
{
	struct buf out = {0};
	cni_error(&out, version, code, msg);
	buf_addc(&out, '\n');
	write_all(1, out.p, out.len);
	return 1;
}

static void warn(struct bytes msg)
{
	struct buf out = {0};
	buf_adds(&out, "warning: ");
	buf_add(&out, msg.p, msg.len);
	buf_addc(&out, '\n');
	write_all(2, out.p, out.len);
}

/* NETCTL_REPLY_TIMEOUT in nanoseconds: the default when it is not a positive number; 0
 * (no limit) when it is beyond 292 years, "inf" included. (The Go plugin's conversion
 * made such a value negative, which the kernel took as "time out at once".) */
static int64_t reply_timeout(void)
{
	double s;
	if (!parse_float(env("NETCTL_REPLY_TIMEOUT"), &s) || !(s > 0))
		return DEFAULT_REPLY;
	double ns = s * (double)SECOND;
	return ns < 9223372036854775808.0 ? (int64_t)ns : 0;
}

/* The working directory as Go's os.Getwd gives it: $PWD when it names the current
 * directory (so a path through a symbolic link stays as the caller wrote it). */
static bool working_dir(struct buf *out)
{
	struct stat dot, pwd;
	const char *env_pwd = getenv("PWD");
	if (stat(".", &dot) != 0)
		return false;
	if (env_pwd != NULL && env_pwd[0] == '/' && stat(env_pwd, &pwd) == 0 &&
	    pwd.st_dev == dot.st_dev && pwd.st_ino == dot.st_ino) {
		buf_adds(out, env_pwd);
		return true;
	}
	char cwd[PATH_MAX];
	if (getcwd(cwd, sizeof cwd) == NULL || cwd[0] != '/')
		return false;
	buf_adds(out, cwd);
	return true;
}

/* -- the socket ------------------------------------------------------------------------ */

/* As Go's syscall.NsecToTimeval: rounded up to the microsecond (0: no timeout). */
static int set_timeout(int fd, int opt, int64_t ns)
{
	ns = (int64_t)((uint64_t)ns + 999);
	struct timeval tv = {.tv_sec = ns / SECOND, .tv_usec = ns % SECOND / 1000};
	return setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

/* A connected socket, or -1 and why. */
static int dial(struct bytes path, struct buf *why)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		buf_adds(why, errno_text(errno));
		return -1;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int err = 0;
	/* A Unix stream connect waits only while the listener's backlog is full, for at most
	 * the send timeout. */
	if (set_timeout(fd, SO_SNDTIMEO, CONNECT_TIMEOUT) != 0) {
		err = errno;
	} else if (path.len > sizeof sa.sun_path ||
		   (path.len == sizeof sa.sun_path && path.p[0] != '@')) {
		err = EINVAL; /* no room for the name and its NUL */
	} else {
		memcpy(sa.sun_path, path.p, path.len);
		socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path.len + 1);
		if (sa.sun_path[0] == '@') { /* Linux's abstract namespace, as Go spells it */
			sa.sun_path[0] = '\0';
			len--;
		}
		while (connect(fd, (struct sockaddr *)&sa, len) != 0)
			if (errno != EINTR) {
				err = errno;
				break;
			}
	}
	if (err == 0)
		return fd;
	close(fd);
	if (err == EAGAIN) {
		buf_adds(why, "no connection within ");
		duration_text(why, CONNECT_TIMEOUT);
	} else {
		buf_adds(why, errno_text(err));
	}
	return -1;
}

static bool timed_out(int err, int64_t timeout, struct buf *why)
{
	if (err == EAGAIN) {
		buf_adds(why, "nothing within ");
		duration_text(why, timeout);
		buf_adds(why, " (NETCTL_REPLY_TIMEOUT)");
	} else {
		buf_adds(why, errno_text(err));
	}
	return false;
}

static bool read_exact(int fd, char *p, size_t n, int64_t timeout, struct buf *why)
{
	while (n > 0) {
		ssize_t k = read(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return timed_out(errno, timeout, why);
		if (k == 0) {
			buf_adds(why, "the daemon closed the connection before answering");
			return false;
		}
		p += k;
		n -= (size_t)k;
	}
	return true;
}

/* exchange sends the frame (its first 4 bytes left for the length) and reads the answer
 * frame into reply. */
static bool exchange(int fd, struct buf *frame, int64_t timeout, struct reply *reply,
		     struct buf *why)
{
	if (set_timeout(fd, SO_SNDTIMEO, timeout) != 0 ||
	    set_timeout(fd, SO_RCVTIMEO, timeout) != 0) {
		buf_adds(why, errno_text(errno));
		return false;
	}
	uint32_t len = (uint32_t)(frame->len - 4);
	unsigned char *head = (unsigned char *)frame->p;
	head[0] = (unsigned char)(len >> 24), head[1] = (unsigned char)(len >> 16);
	head[2] = (unsigned char)(len >> 8), head[3] = (unsigned char)len;
	for (size_t sent = 0; sent < frame->len;) {
		ssize_t n = send(fd, frame->p + sent, frame->len - sent, MSG_NOSIGNAL);
		if (n >= 0)
			sent += (size_t)n;
		else if (errno == EPIPE || errno == ECONNRESET)
			break; /* the daemon refused the frame unread; its answer is already waiting */
		else if (errno != EINTR)
			return timed_out(errno, timeout, why);
	}
	unsigned char size_bytes[4];
	if (!read_exact(fd, (char *)size_bytes, 4, timeout, why))
		return false;
	uint32_t size = (uint32_t)size_bytes[0] << 24 | (uint32_t)size_bytes[1] << 16 |
			(uint32_t)size_bytes[2] << 8 | size_bytes[3];
	if (size > MAX_REPLY) {
		buf_addf(why, "an answer of %u bytes is not the daemon's", size);
		return false;
	}
	char *data = must_alloc(malloc(size + 1));
	if (!read_exact(fd, data, size, timeout, why))
		return false;
	struct buf problem = {0};
	if (!reply_parse(reply, (struct bytes){data, size}, &problem)) {
		buf_adds(why, "the answer is not the daemon's JSON: ");
		buf_add(why, problem.p, problem.len);
		return false;
	}
	return true;
}

/* -- the durable DEL record -------------------------------------------------------------- */

/* path for the C library, or NULL (errno EINVAL) when it holds a NUL, which no system
 * call can take (Go's calls refused it so too). */
static const char *cpath(struct bytes path)
{
	static struct buf b;
	if (memchr(path.p, '\0', path.len) != NULL) {
		errno = EINVAL;
		return NULL;
	}
	b.len = 0;
	buf_add(&b, path.p, path.len);
	return buf_str(&b);
}

/* "op path: error", as Go's os.PathError says it. */
static bool path_error(struct buf *why, const char *op, struct bytes path, int err)
{
	buf_adds(why, op);
	buf_addc(why, ' ');
	buf_add(why, path.p, path.len);
	buf_adds(why, ": ");
	buf_adds(why, errno_text(err));
	return false;
}

/* path and its missing parents made directories, as Go's os.MkdirAll does. */
static bool mkdir_all(struct bytes path, struct buf *why)
{
	struct stat st;
	const char *c = cpath(path);
	if (c != NULL && stat(c, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return true;
		return path_error(why, "mkdir", path, ENOTDIR);
	}
	size_t i = path.len, j;
	while (i > 0 && path.p[i - 1] == '/') /* trailing slashes */
		i--;
	for (j = i; j > 0 && path.p[j - 1] != '/'; j--) /* the last element */
		;
	if (j > 1 && !mkdir_all((struct bytes){path.p, j - 1}, why))
		return false;
	c = cpath(path);
	if (c == NULL || mkdir(c, 0700) != 0) {
		int err = errno;
		if (c != NULL && lstat(c, &st) == 0 && S_ISDIR(st.st_mode))
			return true; /* "foo/.", or made meanwhile */
		return path_error(why, "mkdir", path, err);
	}
	return true;
}

static bool write_file(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* record_del leaves the DEL's frame where the daemon's start-up replay finds it: written
 * to a temporary name, fsynced, renamed to <time_ns>-<pid>.del, the directory fsynced (so
 * the rename survives a crash too). The record's path in where. */
static bool record_del(struct bytes socket_path, struct bytes body, struct buf *where,
		       struct buf *why)
{
	struct buf socket_dir = {0}, dir = {0}, tmp = {0};
	path_dir(&socket_dir, socket_path);
	path_join(&dir, buf_bytes(&socket_dir), PENDING_DIR);
	if (!mkdir_all(buf_bytes(&dir), why))
		return false;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char name[64], tmp_name[80], final_name[80];
	snprintf(name, sizeof name, "%020lld-%d",
		 (long long)now.tv_sec * SECOND + now.tv_nsec, (int)getpid());
	snprintf(tmp_name, sizeof tmp_name, ".%s.tmp", name);
	snprintf(final_name, sizeof final_name, "%s.del", name);
	path_join(&tmp, buf_bytes(&dir), tmp_name);
	path_join(where, buf_bytes(&dir), final_name);

	int fd;
	while ((fd = open(buf_str(&tmp), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		if (errno != EINTR)
			return path_error(why, "open", buf_bytes(&tmp), errno);
	const char *op = NULL;
	if (!write_file(fd, body.p, body.len))
		op = "write";
	else if (fsync(fd) != 0)
		op = "sync";
	int err = errno;
	if (close(fd) != 0 && op == NULL)
		op = "close", err = errno;
	if (op == NULL && rename(buf_str(&tmp), buf_str(where)) != 0) {
		err = errno;
		unlink(buf_str(&tmp));
		buf_adds(why, "rename ");
		buf_add(why, tmp.p, tmp.len);
		buf_addc(why, ' ');
		buf_add(why, where->p, where->len);
		buf_adds(why, ": ");
		buf_adds(why, errno_text(err));
		return false;
	}
	if (op != NULL) {
		unlink(buf_str(&tmp));
		return path_error(why, op, buf_bytes(&tmp), err);
	}
	int dfd = open(buf_str(&dir), O_RDONLY | O_CLOEXEC);
	if (dfd < 0)
		return path_error(why, "open", buf_bytes(&dir), errno);
	bool synced = fsync(dfd) == 0;
	err = errno;
	close(dfd);
	return synced || path_error(why, "sync", buf_bytes(&dir), err);
}

static int del_unanswered(struct bytes version, struct bytes socket_path, struct bytes body,
			  struct buf *why)
{
	struct buf where = {0}, err = {0};
	if (!record_del(socket_path, body, &where, &err)) {
		buf_adds(why, ", and the DEL could not be recorded for it (");
		buf_add(why, err.p, err.len);
		buf_adds(why, "); try again later");
		return fail(version, 11, buf_bytes(why));
	}
	buf_adds(why, "; the DEL is recorded in ");
	buf_add(why, where.p, where.len);
	buf_adds(why, " and finished by the daemon's start-up replay");
	warn(buf_bytes(why));
	return 0;
}

/* why = head, the socket's path, middle, the failure, ")". */
static void daemon_failed(struct buf *why, const char *head, struct bytes path,
			  const char *middle, const struct buf *err)
{
	buf_adds(why, head);
	buf_add(why, path.p, path.len);
	buf_adds(why, middle);
	buf_add(why, err->p, err->len);
	buf_addc(why, ')');
}

/* The daemon did not serve the request (why): a DEL is recorded for its start-up replay;
 * anything else fails with code, 11 saying to try again later. */
static int unanswered(struct bytes version, struct bytes path, struct bytes body,
		      struct buf *why, bool del, int code)
{
	if (del)
		return del_unanswered(version, path, body, why);
	if (code == 11)
		buf_adds(why, "; try again later");
	return fail(version, code, buf_bytes(why));
}

/* -- the exec ---------------------------------------------------------------------------- */

static int run(const char *argv0)
{
	const char *command = env("CNI_COMMAND");
	bool del = strcmp(command, "DEL") == 0;
	struct bytes stdin_ = read_stdin();
	struct conf conf;
	conf_parse(&conf, stdin_);
	struct buf version_buf = {0};
	conf_version(&conf, &version_buf);
	struct bytes version = buf_bytes(&version_buf);
	if (strcmp(command, "VERSION") == 0) {
		struct buf out = {0};
		version_answer(&out, version);
		write_all(1, out.p, out.len);
		return 0;
	}
	if (conf.problem.len > 0 && !del) {
		/* No config, so no "socket" to send it to: answer here (a DEL still goes to the
		 * default socket, which may well be the daemon's). */
		struct buf msg = {0};
		buf_adds(&msg, "netctl-cni: the network config on stdin is not valid: ");
		buf_add(&msg, conf.problem.p, conf.problem.len);
		return fail(version, 6, buf_bytes(&msg));
	}
	struct buf plugin = {0}, path = {0}, netns = {0};
	path_base(&plugin, argv0);
	if (strcmp(buf_str(&plugin), ".") == 0 || strcmp(buf_str(&plugin), "/") == 0) {
		plugin.len = 0;
		buf_adds(&plugin, "netctl-cni");
	}
	conf_socket(&conf, buf_str(&plugin), &path);
	struct buf wd = {0};
	const char *ns = env("CNI_NETNS");
	if (ns[0] != '\0' && ns[0] != '/' && working_dir(&wd))
		path_join(&netns, buf_bytes(&wd), ns);
	else
		buf_adds(&netns, ns);
	struct request req = {
		.command = command, .container_id = env("CNI_CONTAINERID"),
		.netns = buf_str(&netns), .ifname = env("CNI_IFNAME"), .args = env("CNI_ARGS"),
		.path = env("CNI_PATH"), .plugin = buf_str(&plugin),
	};
	struct buf frame = {0};
	buf_add(&frame, "\0\0\0\0", 4); /* the length, once known */
	frame_body(&frame, &req, &conf, stdin_);
	struct bytes body = {frame.p + 4, frame.len - 4};

	struct buf why = {0}, err = {0};
	int fd = dial(buf_bytes(&path), &err);
	if (fd < 0) {
		daemon_failed(&why, "netctl daemon not reachable at ", buf_bytes(&path), " (", &err);
		return unanswered(version, buf_bytes(&path), body, &why, del,
				  strcmp(command, "STATUS") == 0 ? 50 : 11);
	}
	struct reply reply;
	bool answered = exchange(fd, &frame, reply_timeout(), &reply, &err);
	close(fd);
	if (!answered) {
		daemon_failed(&why, "netctl daemon at ", buf_bytes(&path), " gave no answer (", &err);
		return unanswered(version, buf_bytes(&path), body, &why, del, 11);
	}
	if (reply_refused(&reply) && del) {
		buf_adds(&why, "the netctl daemon at ");
		buf_add(&why, path.p, path.len);
		buf_addf(&why, " speaks frame protocol %lld, older than this plugin's %d "
			 "(an upgrade under way)", reply.proto, PROTO);
		return del_unanswered(version, buf_bytes(&path), body, &why);
	}
	if (reply.warning.len > 0)
		warn(buf_bytes(&reply.warning));
	if (reply.output.len > 0) {
		buf_addc(&reply.output, '\n');
		write_all(1, reply.output.p, reply.output.len);
	}
	return reply.status != 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	return run(argc > 0 ? argv[0] : "");
}
