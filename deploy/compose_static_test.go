package deploy_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/inference-cache/inference-cache/policy"
)

// --- compose (static; compose/compose_test.go runs it) ------------------

func TestCompose_ThreeNodesOwnVolumesHealthMetrics(t *testing.T) {
	b, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f obj
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	volumes := map[string]string{}
	grpcPorts := map[string]bool{}
	for _, name := range []string{"node1", "node2", "node3"} {
		svc := get(f, "services", name)
		if svc == nil {
			t.Fatalf("no service %s", name)
		}
		env := get(svc, "environment").(obj)
		for k := range env {
			flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "INFERENCE_CACHE_")), "_", "-")
			checkFlag(t, name+" environment "+k, flag)
		}
		if env["INFERENCE_CACHE_BOOTSTRAP_EXPECT"] != "3" || env["INFERENCE_CACHE_NODE_ID"] != name || env["INFERENCE_CACHE_ADVERTISE_ADDR"] != name {
			t.Errorf("%s: want bootstrap expect 3, node id and advertise address %s: %v", name, name, env)
		}
		if j := fmt.Sprint(env["INFERENCE_CACHE_JOIN"]); j != "node1:7403,node2:7403,node3:7403" {
			t.Errorf("%s: join %q", name, j)
		}
		for _, v := range strs(svc, "volumes") {
			if src, dst, _ := strings.Cut(v, ":"); dst == "/data" {
				if other, dup := volumes[src]; dup {
					t.Errorf("%s and %s share the data volume %s", name, other, src)
				}
				volumes[src] = name
				if _, declared := get(f, "volumes").(obj)[src]; !declared {
					t.Errorf("%s: data volume %s is not a named volume", name, src)
				}
			}
		}
		test := strs(svc, "healthcheck", "test")
		if len(test) < 3 || test[0] != "CMD" || test[2] != "health" {
			t.Errorf("%s: healthcheck %q, want the image's `health` subcommand", name, test)
		}
		var metrics bool
		for _, p := range strs(svc, "ports") {
			if strings.HasSuffix(p, ":7404") {
				metrics = true
			}
			if strings.HasSuffix(p, ":7401") {
				grpcPorts[p] = true
			}
		}
		if !metrics {
			t.Errorf("%s: metrics port 7404 is not published", name)
		}
		nets := get(svc, "networks").(obj)
		if _, ok := nets["cluster"]; !ok || len(nets) != 1 {
			t.Errorf("%s: want only the private network cluster, got %v", name, nets)
		}
	}
	if len(volumes) != 3 || len(grpcPorts) != 3 {
		t.Errorf("want three data volumes and three gRPC ports, got %v %v", volumes, grpcPorts)
	}
	if str(f, "services", "demo-fleet", "profiles", 0) != "demo" {
		t.Error("the demo fleet must sit behind the demo profile")
	}
	if _, err := policy.LoadFile("compose/policy.yaml"); err != nil {
		t.Errorf("compose policy: %v", err)
	}
}
