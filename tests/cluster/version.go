package main

// The one Kubernetes release this control plane is built from. gen-replace.sh reads it
// to pin every staging module to the matching v0.X.Y tag.
const k8sVersion = "v1.36.3"
