//! The plugin's `kruise.io/sidecarset-hash` values are Kruise's: test vectors made by
//! Kruise's own hash code (`testdata/kruise-hash`, `go run . hashes <
//! tests/data/kruise-hash-specs.json > tests/data/kruise-hashes.json`) over specs as
//! Kruise's defaulting stores them, with Go's encoding quirks: quantities to print
//! canonically ("0.5" → "500m"), HTML-escaped strings, pointer `false` kept and plain
//! `false` dropped, ports given by name, init containers hashed only beside a native
//! sidecar.

use serde_json::Value;
use sidecarset::SidecarSetSpec;
use sidecarset::gojson::{encode_spec, kruise_hashes};

#[test]
fn hashes_are_kruises_byte_for_byte() {
    let specs: Vec<Value> = serde_json::from_str(include_str!("data/kruise-hash-specs.json")).unwrap();
    let want: Vec<Value> = serde_json::from_str(include_str!("data/kruise-hashes.json")).unwrap();
    assert_eq!(specs.len(), want.len());
    for (i, (spec, want)) in specs.into_iter().zip(want).enumerate() {
        let spec: SidecarSetSpec = serde_json::from_value(spec).unwrap();
        assert_eq!(encode_spec(&spec, false), want["encoded"].as_str().unwrap(), "case {i}: Go's encoding");
        let (h, w) = kruise_hashes(&spec);
        assert_eq!(h, want["hash"].as_str().unwrap(), "case {i}: hash");
        assert_eq!(w, want["hashWithoutImage"].as_str().unwrap(), "case {i}: hash without image");
    }
}
