//! Base64, the standard padded alphabet, as Lambda events and parked
//! envelopes carry it: one crate (`base64-simd`) for every payload, and an
//! error that says what is wrong with a text that is not base64.

use base64_simd::STANDARD;

/// `data` in base64.
pub(crate) fn encode(data: &[u8]) -> String {
    STANDARD.encode_to_string(data)
}

/// The bytes `text` holds, or what makes it not base64.
pub(crate) fn decode(text: &[u8]) -> Result<Vec<u8>, String> {
    STANDARD.decode_to_vec(text).map_err(|_| why_not(text))
}

/// What makes `text` not base64 (canonical, padded, standard alphabet):
/// the first byte outside it, a length that is not a multiple of four, or
/// padding or trailing bits where none may be.
pub(crate) fn why_not(text: &[u8]) -> String {
    let in_alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
    let padding = text.iter().rev().take_while(|&&b| b == b'=').count();
    let body = &text[..text.len() - padding];
    if let Some(at) = body.iter().position(|&b| !in_alphabet(b)) {
        return format!("invalid byte {:?} at offset {at}", char::from(body[at]));
    }
    if !text.len().is_multiple_of(4) {
        return format!("invalid length {} (not a multiple of 4)", text.len());
    }
    if padding > 2 {
        return format!("invalid padding ({padding} '=')");
    }
    "invalid last symbol (trailing bits set)".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_decodes_and_everything_else_says_why() {
        assert_eq!(decode(b"QUJD").unwrap(), b"ABC");
        assert_eq!(decode(b"QUI=").unwrap(), b"AB");
        assert_eq!(decode(b"").unwrap(), b"");
        assert_eq!(encode(b"AB"), "QUI=");
        for (text, why) in [
            ("QQ", "invalid length 2"),
            ("QQ=", "invalid length 3"),
            ("Q===", "invalid padding"),
            ("QR==", "invalid last symbol"),
            ("QUJD\n", "invalid byte '\\n' at offset 4"),
            (" QUJD", "invalid byte ' ' at offset 0"),
            ("QQ==QQ==", "invalid byte '=' at offset 2"),
            ("-_8=", "invalid byte '-' at offset 0"),
        ] {
            let error = decode(text.as_bytes()).unwrap_err();
            assert!(error.starts_with(why), "{text:?}: {error}");
        }
    }
}
