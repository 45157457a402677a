//! A C ABI over the tokenizers crate for xserve's tokenizer package (Go,
//! which loads this library with dlopen). Every function catches panics;
//! errors come back as a string the caller frees with xs_tok_free_string.

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use tokenizers::Tokenizer;

/// The ABI's version; the Go side checks it.
#[no_mangle]
pub extern "C" fn xs_tok_abi_version() -> u32 {
    1
}

fn set_err(err: *mut *mut c_char, msg: String) {
    if !err.is_null() {
        let s = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        unsafe { *err = s.into_raw() };
    }
}

fn guard<T>(err: *mut *mut c_char, fallback: T, f: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_err(err, e);
            fallback
        }
        Err(_) => {
            set_err(err, "tokenizers panicked".to_string());
            fallback
        }
    }
}

/// Parses a tokenizer.json document (len bytes at json).
#[no_mangle]
pub extern "C" fn xs_tok_from_bytes(json: *const u8, len: usize, err: *mut *mut c_char) -> *mut Tokenizer {
    guard(err, ptr::null_mut(), || {
        let bytes = unsafe { std::slice::from_raw_parts(json, len) };
        let t = Tokenizer::from_bytes(bytes).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(t)))
    })
}

#[no_mangle]
pub extern "C" fn xs_tok_free(t: *mut Tokenizer) {
    if !t.is_null() {
        unsafe { drop(Box::from_raw(t)) };
    }
}

/// Encodes len bytes of UTF-8 text; the ids (out_len of them) are freed with xs_tok_free_ids.
#[no_mangle]
pub extern "C" fn xs_tok_encode(
    t: *const Tokenizer,
    text: *const u8,
    len: usize,
    add_special: bool,
    out_len: *mut usize,
    err: *mut *mut c_char,
) -> *mut u32 {
    guard(err, ptr::null_mut(), || {
        let t = unsafe { &*t };
        let bytes = unsafe { std::slice::from_raw_parts(text, len) };
        let s = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
        let enc = t.encode(s, add_special).map_err(|e| e.to_string())?;
        let ids: Box<[u32]> = enc.get_ids().to_vec().into_boxed_slice();
        unsafe { *out_len = ids.len() };
        Ok(Box::into_raw(ids) as *mut u32)
    })
}

#[no_mangle]
pub extern "C" fn xs_tok_free_ids(ids: *mut u32, len: usize) {
    if !ids.is_null() {
        unsafe { drop(Box::from_raw(ptr::slice_from_raw_parts_mut(ids, len))) };
    }
}

/// Decodes ids to a NUL-terminated string, freed with xs_tok_free_string.
#[no_mangle]
pub extern "C" fn xs_tok_decode(
    t: *const Tokenizer,
    ids: *const u32,
    len: usize,
    skip_special: bool,
    err: *mut *mut c_char,
) -> *mut c_char {
    guard(err, ptr::null_mut(), || {
        let t = unsafe { &*t };
        let ids = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ids, len) } };
        let s = t.decode(ids, skip_special).map_err(|e| e.to_string())?;
        Ok(CString::new(s.replace('\0', "")).unwrap_or_default().into_raw())
    })
}

#[no_mangle]
pub extern "C" fn xs_tok_free_string(s: *mut c_char) {
    if !s.is_null() {
        unsafe { drop(CString::from_raw(s)) };
    }
}

/// The vocabulary size, with the added tokens or without.
#[no_mangle]
pub extern "C" fn xs_tok_vocab_size(t: *const Tokenizer, with_added: bool) -> usize {
    let t = unsafe { &*t };
    catch_unwind(AssertUnwindSafe(|| t.get_vocab_size(with_added))).unwrap_or(0)
}

/// The id of a token (-1 when it has none).
#[no_mangle]
pub extern "C" fn xs_tok_token_to_id(t: *const Tokenizer, token: *const c_char) -> i64 {
    let t = unsafe { &*t };
    catch_unwind(AssertUnwindSafe(|| {
        let s = unsafe { CStr::from_ptr(token) }.to_str().ok()?;
        t.token_to_id(s).map(i64::from)
    }))
    .ok()
    .flatten()
    .unwrap_or(-1)
}

/// The largest token id, added tokens included (-1 for an empty vocabulary).
#[no_mangle]
pub extern "C" fn xs_tok_max_id(t: *const Tokenizer) -> i64 {
    let t = unsafe { &*t };
    catch_unwind(AssertUnwindSafe(|| t.get_vocab(true).values().max().map(|&v| i64::from(v)).unwrap_or(-1))).unwrap_or(-1)
}
