package main

import (
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Every position below is counted by hand on the input as typed (line and
// column from 1, the column in characters), not by the code under test.
func TestParseWriteInput_ErrorsPointAtTheInputAsTyped(t *testing.T) {
	const shape = "an IngestRequest or array of events"
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "the input is empty"},
		{"blank", " \n\t", "the input is empty"},
		{"trailing comma in a bare array", `[{"kind":"STORED"},]`,
			"not valid JSON at line 1, column 20: invalid character ']' looking for beginning of value"},
		{"truncated bare array", `[{"kind":"STORED"}`,
			"the input ends at line 1, column 19 before its JSON value is closed (a missing ] or })"},
		{"unknown field in the second event, second line", "  [{\"kind\":\"STORED\",\"replica_id\":\"a\"},\n {\"kind\":\"STORED\",\"bogus\":1}]",
			`event 1 (at line 2, column 19): unknown field "bogus"`},
		{"bad enum in a request object", `{"events":[{"kind":"STORED"},{"kind":"NOPE"}]}`,
			`event 1 (at line 1, column 38): invalid value for enum field kind: "NOPE"`},
		{"non-object item", `[{"kind":"STORED"}, 7]`, "event 1 (at line 1, column 21): unexpected token 7"},
		{"data after the value", `[{"kind":"STORED"}] x`, "unexpected data after the JSON value at line 1, column 21"},
		{"events not an array", `{"events": 3}`, "not " + shape + " at line 1, column 12: unexpected token 3"},
		{"multibyte characters before the error", `[{"replica_id":"é—ü","kind":"X"}]`,
			`event 0 (at line 1, column 29): invalid value for enum field kind: "X"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := parseWriteInput([]byte(c.in), "events", shape, &pb.IngestRequest{})
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v\nwant       %s", err, c.want)
			}
		})
	}
}

func TestParseWriteInput_BareArrayAndObjectGiveTheSameRequest(t *testing.T) {
	var a, o pb.IngestRequest
	if err := parseWriteInput([]byte(` [{"kind":"STORED","replica_id":"r","token_ids":[1,2]}, {"kind":"CLEARED","replica_id":"r"}]`), "events", "x", &a); err != nil {
		t.Fatal(err)
	}
	if err := parseWriteInput([]byte(`{"events":[{"kind":"STORED","replica_id":"r","token_ids":[1,2]},{"kind":"CLEARED","replica_id":"r"}]}`), "events", "x", &o); err != nil {
		t.Fatal(err)
	}
	if len(a.Events) != 2 || a.Events[1].Kind != pb.BlockEvent_CLEARED || len(a.Events[0].TokenIds) != 2 || a.String() != o.String() {
		t.Fatalf("bare array %v\nobject     %v", &a, &o)
	}
	var s pb.ReportReplicaStatsRequest
	err := parseWriteInput([]byte(`[{"replica_id":"r"},{"pressure":"high"}]`), "stats", "x", &s)
	if err == nil || err.Error() != `stats entry 1 (at line 1, column 33): invalid value for double field pressure: "high"` {
		t.Fatalf("stats error: %v", err)
	}
}

// One item object where the request or an array is expected is refused
// with the way to send it; protojson's field names come back as the input
// spells them (it reports waitingRequests for waiting_requests).
func TestParseWriteInput_SingleObjectAndFieldNamesAsTyped(t *testing.T) {
	for _, c := range []struct {
		name, field, in, want string
	}{
		{"one event", "events", `{"kind":"CLEARED","replica_id":"r"}`,
			"one event object, not the request: wrap it in [ ] to send it as an array of one event"},
		{"one stats entry with a bad value", "stats", `{"replica_id":"r","waiting_requests":-3}`,
			"one stats entry object, not the request: wrap it in [ ] to send it as an array of one stats entry"},
		{"snake_case in an array", "stats", `[{"replica_id":"r","waiting_requests":-3}]`,
			"stats entry 0 (at line 1, column 39): invalid value for uint32 field waiting_requests: -3"},
		{"lowerCamelCase in an array", "stats", `[{"replicaId":"r","waitingRequests":-3}]`,
			"stats entry 0 (at line 1, column 37): invalid value for uint32 field waitingRequests: -3"},
		{"snake_case in a request object", "stats", `{"stats":[{"replica_id":"r","running_requests":"x"}]}`,
			`stats entry 0 (at line 1, column 48): invalid value for uint32 field running_requests: "x"`},
		{"inside a repeated field", "events", `[{"kind":"STORED","token_ids":[1,-2]}]`,
			"event 0 (at line 1, column 34): invalid value for uint32 field token_ids: -2"},
		{"a map value", "stats", `[{"tenant_hit_rate":{"a":"x"}}]`,
			`stats entry 0 (at line 1, column 26): invalid value for double field tenant_hit_rate["a"]: "x"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.field == "events" {
				err = parseWriteInput([]byte(c.in), c.field, "the request", &pb.IngestRequest{})
			} else {
				err = parseWriteInput([]byte(c.in), c.field, "the request", &pb.ReportReplicaStatsRequest{})
			}
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v\nwant       %s", err, c.want)
			}
		})
	}
}
