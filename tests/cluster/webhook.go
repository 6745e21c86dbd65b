package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
)

func init() { components["test-webhook"] = testWebhook }

// testWebhook serves a mutating admission webhook on 127.0.0.1 for the control-plane
// tests: it adds the label `webhook: seen` to every object it reviews. It writes the
// CA bundle (base64) and the chosen port into --dir, then serves until killed.
func testWebhook(args []string) int {
	fs := flag.NewFlagSet("test-webhook", flag.ContinueOnError)
	dir := fs.String("dir", "", "where to write ca.b64 and port")
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: cluster test-webhook --dir DIR")
		return 2
	}
	if err := writePKI(*dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(*dir, "apiserver.crt"), filepath.Join(*dir, "apiserver.key"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ca, _ := os.ReadFile(filepath.Join(*dir, "ca.crt"))
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.WriteFile(filepath.Join(*dir, "ca.b64"), []byte(base64.StdEncoding.EncodeToString(ca)), 0o600)
	_ = os.WriteFile(filepath.Join(*dir, "port"), []byte(fmt.Sprint(l.Addr().(*net.TCPAddr).Port)), 0o600)
	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review map[string]any
		if err := json.Unmarshal(body, &review); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		req, _ := review["request"].(map[string]any)
		patch := `[{"op":"add","path":"/metadata/labels","value":{}},{"op":"add","path":"/metadata/labels/webhook","value":"seen"}]`
		obj, _ := req["object"].(map[string]any)
		if meta, _ := obj["metadata"].(map[string]any); meta != nil && meta["labels"] != nil {
			patch = `[{"op":"add","path":"/metadata/labels/webhook","value":"seen"}]`
		}
		resp := map[string]any{
			"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
			"response": map[string]any{
				"uid": req["uid"], "allowed": true, "patchType": "JSONPatch",
				"patch": base64.StdEncoding.EncodeToString([]byte(patch)),
			},
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
	if err := http.Serve(l, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
