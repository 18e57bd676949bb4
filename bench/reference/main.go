// A minimal admission webhook in Go's standard library doing CastSlice's
// default rewrite (the `resource` backend), to set beside CastSlice in the
// end-to-end latency benchmark: same front end, same Pods, same patch.
// Not a product: no configuration, no validation beyond what the bench sends.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
)

const (
	gpu    = "nvidia.com/gpu"
	shared = "nvidia.com/gpu-shared"
)

var presets = map[string]int{"training": 4, "inference": 2, "batch": 2, "dev": 1}

type container struct {
	Name      string `json:"name"`
	Resources struct {
		Requests map[string]any `json:"requests"`
		Limits   map[string]any `json:"limits"`
	} `json:"resources"`
}

type review struct {
	Request struct {
		UID       string `json:"uid"`
		Operation string `json:"operation"`
		Object    struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec map[string]json.RawMessage `json:"spec"`
		} `json:"object"`
	} `json:"request"`
}

type operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func slices(annotations map[string]string) (int, string) {
	if ratio, err := strconv.Atoi(annotations["castops.io/slice-ratio"]); err == nil && ratio >= 1 && ratio <= 1000 {
		return ratio, "slice-ratio"
	}
	if count, ok := presets[annotations["castops.io/workload-type"]]; ok {
		return count, "workload-type"
	}
	return 1, "default"
}

func patch(r *review) []operation {
	annotations := r.Request.Object.Metadata.Annotations
	if r.Request.Operation != "CREATE" || annotations["castops.io/optimize"] != "true" {
		return nil
	}
	count, source := slices(annotations)
	quantity := strconv.Itoa(count)
	var ops []operation
	original := map[string]string{}
	for _, list := range []string{"initContainers", "containers", "ephemeralContainers"} {
		var items []container
		if raw, ok := r.Request.Object.Spec[list]; !ok || json.Unmarshal(raw, &items) != nil {
			continue
		}
		for i, c := range items {
			base := fmt.Sprintf("/spec/%s/%d/resources", list, i)
			for field, values := range map[string]map[string]any{"requests": c.Resources.Requests, "limits": c.Resources.Limits} {
				if asked, ok := values[gpu]; ok {
					original[c.Name] = fmt.Sprint(asked)
					ops = append(ops,
						operation{"remove", base + "/" + field + "/nvidia.com~1gpu", nil},
						operation{"add", base + "/" + field + "/nvidia.com~1gpu-shared", quantity})
				}
			}
		}
	}
	if len(ops) == 0 {
		return nil
	}
	record, _ := json.Marshal(map[string]any{"slices": count, "source": source, "backend": "resource", "original": original})
	key := strings.ReplaceAll("castslice.castops.io/applied", "/", "~1")
	return append(ops, operation{"add", "/metadata/annotations/" + key, string(record)})
}

func serve(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if req.Method == http.MethodGet {
		// The harness's readiness check, as CastSlice answers it.
		io.WriteString(w, `{"status":"ok"}`)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 7<<20))
	var r review
	if err != nil || json.Unmarshal(body, &r) != nil {
		http.Error(w, `{"error":"not an AdmissionReview"}`, http.StatusBadRequest)
		return
	}
	response := map[string]any{"uid": r.Request.UID, "allowed": true}
	if ops := patch(&r); ops != nil {
		encoded, _ := json.Marshal(ops)
		response["patchType"] = "JSONPatch"
		response["patch"] = encoded // []byte encodes as base64
	}
	json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response,
	})
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, http.HandlerFunc(serve)))
}
