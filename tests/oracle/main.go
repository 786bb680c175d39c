// The Go oracle of tests/go_oracle.rs: Go's own answers (the standard library only, so it
// builds offline) to what the Rust side reimplements from Go. One JSON request per line on
// stdin, one JSON answer per line on stdout.
//
//   {"op": "tolerations", "text": T} -> json.Unmarshal(T, &[]Toleration): {"ok": list} or {"err": true}
//   {"op": "time", "text": S}        -> time.Parse(time.RFC3339, S), as metav1.Time reads JSON:
//                                       {"unix": s, "nanos": n} or {"err": true}
//   {"op": "string", "bytes": B}     -> json.Marshal(string(B)): {"json": J}
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"time"
)

// Toleration has k8s.io/api/core/v1.Toleration's fields and JSON tags (its operator and effect
// are string types there): encoding/json decodes both alike.
type Toleration struct {
	Key               string `json:"key,omitempty"`
	Operator          string `json:"operator,omitempty"`
	Value             string `json:"value,omitempty"`
	Effect            string `json:"effect,omitempty"`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

type request struct {
	Op    string `json:"op"`
	Text  string `json:"text"`
	Bytes []byte `json:"bytes"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			panic(err)
		}
		var answer map[string]any
		switch r.Op {
		case "tolerations":
			var ts []Toleration
			if err := json.Unmarshal([]byte(r.Text), &ts); err != nil {
				answer = map[string]any{"err": true}
			} else {
				if ts == nil {
					ts = []Toleration{}
				}
				answer = map[string]any{"ok": ts}
			}
		case "time":
			if t, err := time.Parse(time.RFC3339, r.Text); err != nil {
				answer = map[string]any{"err": true}
			} else {
				answer = map[string]any{"unix": t.Unix(), "nanos": t.Nanosecond()}
			}
		case "string":
			b, err := json.Marshal(string(r.Bytes))
			if err != nil {
				panic(err)
			}
			answer = map[string]any{"json": string(b)}
		default:
			panic("unknown op " + r.Op)
		}
		if err := enc.Encode(answer); err != nil {
			panic(err)
		}
		if err := out.Flush(); err != nil {
			panic(err)
		}
	}
	if err := in.Err(); err != nil {
		panic(err)
	}
}
