//! Plugin bytes as delivered: plain or gzip-compressed (a ConfigMap holds at most 1 MiB,
//! so larger plugins travel gzipped).

use super::SourceError;
use std::io::Read;

/// Largest plugin accepted after decompression. Why 32 MiB: the biggest real plugins
/// are a few MiB; a gzip bomb stops here instead of filling memory.
pub const MAX_PLUGIN_BYTES: usize = 32 << 20;

/// The plugin's wasm bytes: gunzipped when they start with the gzip magic.
pub fn decode(raw: &[u8]) -> Result<Vec<u8>, SourceError> {
    if !raw.starts_with(&[0x1f, 0x8b]) {
        if raw.len() > MAX_PLUGIN_BYTES {
            return Err(SourceError::Invalid(format!(
                "plugin is {} bytes, over the {MAX_PLUGIN_BYTES} byte limit",
                raw.len()
            )));
        }
        return Ok(raw.to_vec());
    }
    let mut out = Vec::new();
    let mut dec = flate2::read::GzDecoder::new(raw).take(MAX_PLUGIN_BYTES as u64 + 1);
    dec.read_to_end(&mut out).map_err(|e| SourceError::Invalid(format!("bad gzip data: {e}")))?;
    if out.len() > MAX_PLUGIN_BYTES {
        return Err(SourceError::Invalid(format!("plugin is over {MAX_PLUGIN_BYTES} bytes after decompression")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn plain_gzip_truncated_and_bomb() {
        assert_eq!(decode(b"\0asm").unwrap(), b"\0asm");
        assert_eq!(decode(&gz(b"\0asm\x0d\0\x01\0")).unwrap(), b"\0asm\x0d\0\x01\0");
        let full = gz(&vec![7u8; 10_000]);
        let err = decode(&full[..full.len() / 2]).unwrap_err();
        assert!(err.to_string().contains("bad gzip"), "{err}");
        let bomb = gz(&vec![0u8; MAX_PLUGIN_BYTES + 10]);
        assert!(decode(&bomb).unwrap_err().to_string().contains("after decompression"));
    }
}
