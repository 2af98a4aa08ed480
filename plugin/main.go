// Command netctl-cni is netctl's thin CNI plugin, installed by `netctl install-cni` as
// two executables: netctl-cni (the meta-plugin type) and netctl-ipam (the IPAM type);
// it knows which it is by the name it was run by (argv[0]).
//
// The runtime execs it once per pod sandbox, so it does as little as it can: read the
// CNI_* variables and stdin, make CNI_NETNS absolute, send one frame to the daemon's Unix
// socket ("socket" in the network config, in its "ipam" section when run as
// netctl-ipam; default /run/netctl/netctl.sock), print the answer, exit 0 or 1. The
// frame, both ways: a 4-byte big-endian length, then that many bytes of JSON (frame.go
// says what goes in). It is built with Go's standard library only and CGO_ENABLED=0: a
// static executable that needs nothing of the host (no libc, no interpreter).
//
//   - VERSION is answered here, without the daemon; so is a stdin that is not a JSON
//     object (code 6): it cannot say which socket to use.
//   - Daemon unreachable: ADD and CHECK fail at once with code 11 (try again later);
//     STATUS with code 50; DEL writes its frame to a durable record in pending-del/
//     beside the socket (a temporary name, fsynced, renamed, the directory fsynced, so a
//     record is whole or absent) and exits 0 with a warning: the daemon finishes
//     recorded DELs in its start-up replay, before it serves. A DEL that cannot even be
//     recorded exits 1 (code 11), so the runtime retries it.
//   - A daemon that refuses the frame's protocol (older than this plugin, during a
//     rolling upgrade): its error is printed (code 11), and a DEL is recorded as when the
//     daemon is down, for the upgraded daemon's start-up replay.
//
// The reply may take as long as the daemon's work (NETCTL_REPLY_TIMEOUT seconds,
// default 300); connecting gives up after 2 seconds.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const (
	pendingDir     = "pending-del" // beside the socket: DELs recorded for the daemon
	connectTimeout = 2 * time.Second
	defaultReply   = 300 * time.Second
	maxReply       = 64 << 20 // a larger reply frame is not the daemon's
)

func main() {
	os.Exit(run())
}

func run() int {
	command := os.Getenv("CNI_COMMAND")
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		stdin = nil
	}
	conf := ParseConf(stdin)
	version := conf.Version()
	if command == "VERSION" {
		os.Stdout.Write(VersionAnswer(version))
		return 0
	}
	if conf.problem != "" && command != "DEL" {
		// No config, so no "socket" to send it to: answer here (a DEL still goes to the
		// default socket, which may well be the daemon's).
		return fail(version, 6, "netctl-cni: the network config on stdin is not valid: "+
			conf.problem)
	}
	plugin := filepath.Base(os.Args[0])
	if plugin == "." || plugin == "/" {
		plugin = "netctl-cni"
	}
	path := conf.Socket(plugin)
	netns := os.Getenv("CNI_NETNS")
	if netns != "" && !filepath.IsAbs(netns) {
		if abs, err := filepath.Abs(netns); err == nil {
			netns = abs
		}
	}
	body := FrameBody(Request{
		Command: command, ContainerID: os.Getenv("CNI_CONTAINERID"), Netns: netns,
		IfName: os.Getenv("CNI_IFNAME"), Args: os.Getenv("CNI_ARGS"),
		Path: os.Getenv("CNI_PATH"), Plugin: plugin,
	}, conf, stdin)

	fd, err := dial(path)
	if err != nil {
		why := fmt.Sprintf("netctl daemon not reachable at %s (%v)", path, err)
		switch command {
		case "DEL":
			return delUnanswered(version, path, body, why)
		case "STATUS":
			return fail(version, 50, why)
		}
		return fail(version, 11, why+"; try again later")
	}
	reply, err := exchange(fd, body, replyTimeout())
	syscall.Close(fd)
	if err != nil {
		why := fmt.Sprintf("netctl daemon at %s gave no answer (%v)", path, err)
		if command == "DEL" {
			return delUnanswered(version, path, body, why)
		}
		return fail(version, 11, why+"; try again later")
	}
	if reply.Refused() && command == "DEL" {
		why := fmt.Sprintf("the netctl daemon at %s speaks frame protocol %d, older than "+
			"this plugin's %d (an upgrade under way)", path, reply.Proto, Proto)
		return delUnanswered(version, path, body, why)
	}
	if reply.Warning != "" {
		fmt.Fprintf(os.Stderr, "warning: %s\n", reply.Warning)
	}
	if reply.Output != "" {
		os.Stdout.WriteString(reply.Output + "\n")
	}
	if reply.Status != 0 {
		return 1
	}
	return 0
}

func fail(version string, code int, msg string) int {
	os.Stdout.Write(append(CNIError(version, code, msg), '\n'))
	return 1
}

func replyTimeout() time.Duration {
	if s, err := strconv.ParseFloat(os.Getenv("NETCTL_REPLY_TIMEOUT"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return defaultReply
}

// -- the socket ------------------------------------------------------------------------
// Raw system calls, not package net: they are all the plugin needs, and they keep the
// executable small and its start quick (no poller, no resolver).

func dial(path string) (int, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	// A Unix stream connect waits only while the listener's backlog is full, for at most
	// the send timeout.
	if err = setTimeout(fd, syscall.SO_SNDTIMEO, connectTimeout); err == nil {
		err = retry(func() error {
			return syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		})
	}
	if err != nil {
		syscall.Close(fd)
		if errors.Is(err, syscall.EAGAIN) {
			err = fmt.Errorf("no connection within %v", connectTimeout)
		}
		return -1, err
	}
	return fd, nil
}

// exchange sends the frame and reads the answer frame.
func exchange(fd int, body []byte, timeout time.Duration) (Reply, error) {
	var reply Reply
	if err := setTimeout(fd, syscall.SO_SNDTIMEO, timeout); err != nil {
		return reply, err
	}
	if err := setTimeout(fd, syscall.SO_RCVTIMEO, timeout); err != nil {
		return reply, err
	}
	frame := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	frame = append(frame, body...)
	for len(frame) > 0 {
		var n int
		err := retry(func() (err error) {
			n, err = syscall.SendmsgN(fd, frame, nil, nil, syscall.MSG_NOSIGNAL)
			return err
		})
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			break // the daemon refused the frame unread; its answer is already waiting
		}
		if err != nil {
			return reply, timedOut(err, timeout)
		}
		frame = frame[n:]
	}
	head, err := readExact(fd, 4)
	if err != nil {
		return reply, timedOut(err, timeout)
	}
	size := binary.BigEndian.Uint32(head)
	if size > maxReply {
		return reply, fmt.Errorf("an answer of %d bytes is not the daemon's", size)
	}
	data, err := readExact(fd, int(size))
	if err != nil {
		return reply, timedOut(err, timeout)
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return reply, fmt.Errorf("the answer is not the daemon's JSON: %v", err)
	}
	return reply, nil
}

func readExact(fd int, n int) ([]byte, error) {
	buf := make([]byte, n)
	for got := 0; got < n; {
		var k int
		err := retry(func() (err error) {
			k, err = syscall.Read(fd, buf[got:])
			return err
		})
		if err != nil {
			return nil, err
		}
		if k == 0 {
			return nil, errors.New("the daemon closed the connection before answering")
		}
		got += k
	}
	return buf, nil
}

func setTimeout(fd, opt int, d time.Duration) error {
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	return syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv)
}

// retry: call again while a signal interrupts it (the Go runtime's own signals do).
func retry(call func() error) error {
	for {
		if err := call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func timedOut(err error, timeout time.Duration) error {
	if errors.Is(err, syscall.EAGAIN) {
		return fmt.Errorf("nothing within %v (NETCTL_REPLY_TIMEOUT)", timeout)
	}
	return err
}

// -- the durable DEL record --------------------------------------------------------------

func delUnanswered(version, socketPath string, body []byte, why string) int {
	where, err := recordDel(socketPath, body)
	if err != nil {
		return fail(version, 11, fmt.Sprintf("%s, and the DEL could not be recorded for it "+
			"(%v); try again later", why, err))
	}
	fmt.Fprintf(os.Stderr, "warning: %s; the DEL is recorded in %s and finished by the "+
		"daemon's start-up replay\n", why, where)
	return 0
}

// recordDel leaves the DEL's frame where the daemon's start-up replay finds it: written
// to a temporary name, fsynced, renamed to <time_ns>-<pid>.del, the directory fsynced
// (so the rename survives a crash too). The record's path.
func recordDel(socketPath string, body []byte) (string, error) {
	dir := filepath.Join(filepath.Dir(socketPath), pendingDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	name := fmt.Sprintf("%020d-%d", time.Now().UnixNano(), os.Getpid())
	tmp, final := filepath.Join(dir, "."+name+".tmp"), filepath.Join(dir, name+".del")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	d, err := os.Open(dir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return "", err
	}
	return final, nil
}
