package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// The parts of Kruise's apps/v1beta1 SidecarSetSpec a ControllerRevision records.
type PatchPodMetadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	PatchPolicy string            `json:"patchPolicy,omitempty"`
}
type revisionSpec struct {
	Containers       []SidecarContainer            `json:"containers,omitempty"`
	InitContainers   []SidecarContainer            `json:"initContainers,omitempty"`
	Volumes          []corev1.Volume               `json:"volumes,omitempty"`
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	PatchPodMetadata []PatchPodMetadata            `json:"patchPodMetadata,omitempty"`
}

// Kruise's getPatch (pkg/control/sidecarcontrol/history_control.go): the typed spec
// encoded, decoded into maps, five fields under "$patch": "replace", encoded again.
func getPatch(s revisionSpec) string {
	typed, err := json.Marshal(map[string]interface{}{"spec": s})
	if err != nil {
		panic(err)
	}
	var raw map[string]interface{}
	_ = json.Unmarshal(typed, &raw)
	src := raw["spec"].(map[string]interface{})
	dst := map[string]interface{}{"$patch": "replace"}
	for _, k := range []string{"volumes", "containers", "initContainers", "imagePullSecrets", "patchPodMetadata"} {
		dst[k] = src[k]
	}
	out, err := json.Marshal(map[string]interface{}{"spec": dst})
	if err != nil {
		panic(err)
	}
	return string(out)
}

// Kubernetes' HashControllerRevision (pkg/controller/history/controller_history.go).
func hashRevision(data string, probe int32) string {
	hf := fnv.New32()
	hf.Write([]byte(data))
	hf.Write([]byte(strconv.FormatInt(int64(probe), 10)))
	return rand.SafeEncodeString(fmt.Sprint(hf.Sum32()))
}

// revisions reads [spec] and writes [{data, hash (collision count 0), hash1 (1)}].
func revisions() {
	var specs []revisionSpec
	if err := json.NewDecoder(os.Stdin).Decode(&specs); err != nil {
		panic(err)
	}
	type out struct {
		Data  string `json:"data"`
		Hash  string `json:"hash"`
		Hash1 string `json:"hash1"`
	}
	var res []out
	for _, s := range specs {
		d := getPatch(s)
		res = append(res, out{Data: d, Hash: hashRevision(d, 0), Hash1: hashRevision(d, 1)})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		panic(err)
	}
}
