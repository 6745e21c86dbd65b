// Kruise's SidecarSet hashes (pkg/control/sidecarcontrol/hash.go at Kruise 1.9,
// SidecarSetHashV1beta1 and SidecarSetHashWithoutImageV1beta1), computed with
// Kruise's own encoding for the test vectors of plugins/sidecarset/tests/kruise_hash.rs,
// and the Go field layout that the plugin's encoder (src/gojson.rs) follows.
//
//	go run . hashes < specs.json   # [{"containers": [...], "initContainers": [...]}] -> hashes
//	go run . fields                # the struct layout, as Rust source
//	go run . revisions < revision-specs.json   # ControllerRevision data and name hashes
package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Kruise's apps/v1beta1 SidecarContainer and the types it uses (apis/apps/v1beta1/sidecarset_types.go).
type SidecarContainer struct {
	corev1.Container        `json:",inline"`
	PodInjectPolicy         string                          `json:"podInjectPolicy,omitempty"`
	UpgradeStrategy         SidecarContainerUpgradeStrategy `json:"upgradeStrategy,omitempty"`
	ShareVolumePolicy       ShareVolumePolicy               `json:"shareVolumePolicy,omitempty"`
	ShareVolumeDevicePolicy *ShareVolumePolicy              `json:"shareVolumeDevicePolicy,omitempty"`
	TransferEnv             []TransferEnvVar                `json:"transferEnv,omitempty"`
	ResourcesPolicy         *ResourcesPolicy                `json:"resourcesPolicy,omitempty"`
}
type SidecarContainerUpgradeStrategy struct {
	UpgradeType          string `json:"upgradeType,omitempty"`
	HotUpgradeEmptyImage string `json:"hotUpgradeEmptyImage,omitempty"`
}
type ShareVolumePolicy struct {
	Type string `json:"type,omitempty"`
}
type TransferEnvVar struct {
	SourceContainerName     string                     `json:"sourceContainerName,omitempty"`
	SourceContainerNameFrom *SourceContainerNameSource `json:"sourceContainerNameFrom,omitempty"`
	EnvName                 string                     `json:"envName,omitempty"`
	EnvNames                []string                   `json:"envNames,omitempty"`
}
type SourceContainerNameSource struct {
	FieldRef *corev1.ObjectFieldSelector `json:"fieldRef,omitempty"`
}
type ResourcesPolicy struct {
	TargetContainersMode      string        `json:"targetContainersMode"`
	TargetContainersNameRegex string        `json:"targetContainersNameRegex,omitempty"`
	ResourcesExpr             ResourcesExpr `json:"resourcesExpr"`
}
type ResourcesExpr struct {
	Limits   *ResourceExprs `json:"limits,omitempty"`
	Requests *ResourceExprs `json:"requests,omitempty"`
}
type ResourceExprs struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

type spec struct {
	Containers     []SidecarContainer `json:"containers"`
	InitContainers []SidecarContainer `json:"initContainers"`
}

// encodeSidecarSetV1beta1, as Kruise.
func encode(s spec) string {
	m := map[string]interface{}{"containers": s.Containers}
	for _, c := range s.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			m["initContainers"] = s.InitContainers
			break
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func hash(data string) string {
	return rand.SafeEncodeString(fmt.Sprintf("%x", sha256.Sum256([]byte(data))))
}

func hashes() {
	var specs []spec
	if err := json.NewDecoder(os.Stdin).Decode(&specs); err != nil {
		panic(err)
	}
	type out struct {
		Encoded          string `json:"encoded"`
		Hash             string `json:"hash"`
		HashWithoutImage string `json:"hashWithoutImage"`
	}
	var res []out
	for _, s := range specs {
		o := out{Encoded: encode(s), Hash: hash(encode(s))}
		for i := range s.Containers {
			s.Containers[i].Image = ""
		}
		for i := range s.InitContainers {
			s.InitContainers[i].Image = ""
		}
		o.HashWithoutImage = hash(encode(s))
		res = append(res, o)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		panic(err)
	}
}

var (
	quantity    = reflect.TypeOf(resource.Quantity{})
	intOrString = reflect.TypeOf(intstr.IntOrString{})
)

// kind names the encoding of t, queueing the structs it reaches.
func kind(t reflect.Type, queue *[]reflect.Type) string {
	switch {
	case t == quantity:
		return "Quantity"
	case t == intOrString:
		return "IntOrString"
	}
	switch t.Kind() {
	case reflect.Ptr:
		return "Ptr(&" + kind(t.Elem(), queue) + ")"
	case reflect.Slice:
		return "List(&" + kind(t.Elem(), queue) + ")"
	case reflect.Map:
		return "Map(&" + kind(t.Elem(), queue) + ")"
	case reflect.Struct:
		*queue = append(*queue, t)
		return "Struct(" + strings.ToUpper(t.Name()) + ")"
	case reflect.String:
		return "Str"
	case reflect.Bool:
		return "Bool"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "Int"
	}
	panic("unhandled kind " + t.String())
}

// fields lists t's JSON fields in encoding order (embedded structs inlined).
func fields(t reflect.Type, queue *[]reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			out = append(out, fields(f.Type, queue)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(opts, "omitempty")
		out = append(out, fmt.Sprintf("f(%q, %v, %s)", name, omit, kind(f.Type, queue)))
	}
	return out
}

func layout() {
	queue := []reflect.Type{reflect.TypeOf(SidecarContainer{})}
	seen := map[string]string{}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		name := strings.ToUpper(t.Name())
		if _, ok := seen[name]; ok {
			continue
		}
		fs := fields(t, &queue)
		seen[name] = fmt.Sprintf("pub const %s: &[Field] = &[\n    %s,\n];\n", name, strings.Join(fs, ",\n    "))
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Println("// Generated by `go run . fields` in plugins/sidecarset/testdata/kruise-hash (k8s.io/api v0.32.10,")
	fmt.Println("// Kruise 1.9's apps/v1beta1 SidecarContainer); do not edit.")
	fmt.Println("//! Go's JSON layout of Kruise's SidecarContainer: each struct's fields in encoding order.")
	fmt.Println()
	fmt.Println("use crate::gojson::{Field, Kind::*, f};")
	fmt.Println()
	for _, n := range names {
		fmt.Print(seen[n])
	}
}

func main() {
	switch os.Args[1] {
	case "hashes":
		hashes()
	case "fields":
		layout()
	case "revisions":
		revisions()
	}
}
