package main

// The pure half of the plugin: what stdin says, and the frame sent to the daemon.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// Proto is the frame protocol this plugin speaks: the frame's "proto". A frame without
// one is version 1 (the Python plugin's: the same fields). A daemon answers a frame of
// a protocol newer than its own with an error and its own "proto" (see refused).
const Proto = 2

const (
	defaultSocket  = "/run/netctl/netctl.sock"
	latestVersion  = "1.1.0"
	podAnnotations = "io.kubernetes.cri.pod-annotations" // runtimeConfig: dropped from a DEL
)

var supportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// member is one member of a JSON object: its key, and its value exactly as written.
type member struct {
	key   string
	value json.RawMessage
}

// Conf is stdin read as a network config: its members in order, or why it is not one.
type Conf struct {
	text    []byte   // stdin without the JSON whitespace around it
	members []member // nil with problem set
	problem string   // why stdin is not a JSON object ("" when it is one)
}

// ParseConf reads stdin as a JSON object.
func ParseConf(stdin []byte) Conf {
	text := bytes.Trim(stdin, " \t\r\n")
	if !utf8.Valid(text) {
		return Conf{text: text, problem: "not UTF-8"}
	}
	members, err := objectMembers(text)
	if err != nil {
		return Conf{text: text, problem: err.Error()}
	}
	return Conf{text: text, members: members}
}

var errNotObject = errors.New("not a JSON object")

// objectMembers: the members of the JSON object data, each value verbatim; an error when
// data is not one JSON object (invalid JSON, another kind of value, data after it).
func objectMembers(data []byte) ([]member, error) {
	if !json.Valid(data) {
		var v json.RawMessage
		err := json.Unmarshal(data, &v) // for the decoder's precise message
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) && syntax.Offset > 0 {
			at := int(syntax.Offset)
			from, to := at-16, at+16
			if from < 0 {
				from = 0
			}
			if to > len(data) {
				to = len(data)
			}
			err = fmt.Errorf("%v at byte %d, near `%s`", err, at, data[from:to])
		} else if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, err
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, errNotObject
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, err
	}
	members := []member{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		members = append(members, member{key, value})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return members, nil
}

// get: the value of the last member named key (the one a JSON decoder keeps), or nil.
func get(members []member, key string) json.RawMessage {
	var found json.RawMessage
	for _, m := range members {
		if m.key == key {
			found = m.value
		}
	}
	return found
}

// stringOf: the JSON string value, or "" when it is not one.
func stringOf(value json.RawMessage) string {
	var s string
	if value == nil || json.Unmarshal(value, &s) != nil {
		return ""
	}
	return s
}

// Version: the config's cniVersion, for the plugin's own answers; the latest when none.
func (c Conf) Version() string {
	if v := stringOf(get(c.members, "cniVersion")); v != "" {
		return v
	}
	return latestVersion
}

// Socket: the daemon's socket, "socket" of the config (of its "ipam" section when the
// plugin runs as netctl-ipam), else the default.
func (c Conf) Socket(plugin string) string {
	section := c.members
	if plugin == "netctl-ipam" {
		section, _ = objectMembers(get(c.members, "ipam"))
	}
	if s := stringOf(get(section, "socket")); s != "" {
		return s
	}
	return defaultSocket
}

// Request: the frame's fields taken from the environment, in the daemon's names.
type Request struct {
	Command, ContainerID, Netns, IfName, Args, Path, Plugin string
}

// FrameBody is the frame's JSON: "proto", the request, and the network config. A stdin
// that is a JSON object goes in verbatim as the raw value "config" (escaping it into a
// string would make every \u003c, Go's "<", 7 bytes); a DEL's leaves out
// runtimeConfig[podAnnotations] (up to megabytes, and a DEL needs nothing of it). Any
// other stdin, and one holding a \ud… escape (a UTF-16 surrogate, which the daemon's
// decoder may refuse, and with it the whole frame), goes as the string "stdin".
func FrameBody(req Request, conf Conf, stdin []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"proto":` + strconv.Itoa(Proto))
	for _, f := range [...]struct{ name, value string }{
		{"command", req.Command}, {"container_id", req.ContainerID}, {"netns", req.Netns},
		{"ifname", req.IfName}, {"args", req.Args}, {"path", req.Path},
		{"plugin", req.Plugin},
	} {
		b.WriteString(`,"` + f.name + `":`)
		b.Write(quote(f.value))
	}
	text := conf.text
	if conf.problem == "" && req.Command == "DEL" {
		if slim, ok := withoutPodAnnotations(conf.members); ok {
			text = slim
		}
	}
	if conf.problem == "" && !bytes.Contains(text, []byte(`\ud`)) &&
		!bytes.Contains(text, []byte(`\uD`)) {
		b.WriteString(`,"config":`)
		b.Write(text)
	} else {
		if conf.problem != "" {
			text = stdin // as it came, as the older plugin sent it
		}
		b.WriteString(`,"stdin":`)
		b.Write(quote(string(text)))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// withoutPodAnnotations: the object again without runtimeConfig[podAnnotations], every
// other value as written; false when it has none.
func withoutPodAnnotations(members []member) ([]byte, bool) {
	changed := false
	out := make([]member, len(members))
	for i, m := range members {
		out[i] = m
		if m.key != "runtimeConfig" {
			continue
		}
		runtime, err := objectMembers(m.value)
		if err != nil || get(runtime, podAnnotations) == nil {
			continue
		}
		kept := runtime[:0:0]
		for _, r := range runtime {
			if r.key != podAnnotations {
				kept = append(kept, r)
			}
		}
		out[i].value = encodeObject(kept)
		changed = true
	}
	if !changed {
		return nil, false
	}
	return encodeObject(out), true
}

func encodeObject(members []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(quote(m.key))
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// quote: s as a JSON string (invalid UTF-8 replaced by U+FFFD, as Go's encoder does).
func quote(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimRight(b.Bytes(), "\n")
}

// Reply is the daemon's answer frame.
type Reply struct {
	Status  int    `json:"status"`
	Output  string `json:"output"`
	Warning string `json:"warning"`
	Proto   int    `json:"proto"` // the daemon's protocol; 0 from a daemon older than it
}

// Refused: the daemon did not serve the frame, because its protocol is older than the
// frame's. A daemon answers with "proto" less than the frame's only then; one older
// than the field answers without it, and served the frame (it ignores fields it does not
// know, and protocol 2 added only "proto").
func (r Reply) Refused() bool {
	return r.Status != 0 && r.Proto != 0 && r.Proto < Proto
}

// CNIError is the spec's error JSON, on one line.
func CNIError(version string, code int, msg string) []byte {
	out, _ := json.Marshal(struct {
		CNIVersion string `json:"cniVersion"`
		Code       int    `json:"code"`
		Msg        string `json:"msg"`
	}{version, code, msg})
	return out
}

// VersionAnswer is VERSION's result.
func VersionAnswer(version string) []byte {
	out, _ := json.Marshal(struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}{version, supportedVersions})
	return out
}
