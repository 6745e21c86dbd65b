//! The store's bounds and isolation, and a real Cranelift compile through it.
use super::*;
use wasmtime::CacheStore;

/// What Cranelift does for one function: ask, and offer what it compiled on a miss.
fn compile(r: &Reuse, key: &str, code: &str) -> Vec<u8> {
    match r.get(key.as_bytes()) {
        Some(found) => found.into_owned(),
        None => {
            r.insert(key.as_bytes(), code.as_bytes().to_vec());
            code.as_bytes().to_vec()
        }
    }
}

#[test]
fn a_plugin_reuses_its_own_functions_and_no_one_elses() {
    let r = Reuse::new(1 << 20);
    let s = r.scope("a");
    compile(&r, "f", "code of f");
    compile(&r, "g", "code of g");
    assert_eq!(s.commit(), Counts { reused: 0, compiled: 2 });
    let s = r.scope("a");
    assert_eq!(compile(&r, "f", "new code"), b"code of f");
    compile(&r, "h", "code of h");
    assert_eq!(s.commit(), Counts { reused: 1, compiled: 1 });
    // Plugin b has an f too: it compiles its own.
    let s = r.scope("b");
    assert_eq!(compile(&r, "f", "b's f"), b"b's f");
    assert_eq!(s.commit(), Counts { reused: 0, compiled: 1 });
    // a keeps what its last compile used: f and h, not g.
    let s = r.scope("a");
    assert_eq!(compile(&r, "g", "g again"), b"g again");
    assert_eq!(compile(&r, "h", "other"), b"code of h");
    assert_eq!(s.commit(), Counts { reused: 1, compiled: 1 });
    assert_eq!(r.totals(), Counts { reused: 2, compiled: 5 });
}

#[test]
fn outside_a_compile_nothing_is_found_or_kept() {
    let r = Reuse::new(1 << 20);
    assert!(!r.insert(b"f", b"code".to_vec()));
    assert!(r.get(b"f").is_none());
    // Another runtime's scope on this thread is not this one's.
    let other = Reuse::new(1 << 20);
    let _s = other.scope("a");
    assert!(!r.insert(b"f", b"code".to_vec()));
    assert_eq!(r.bytes(), 0);
}

#[test]
fn a_failed_compile_leaves_its_line_as_it_was() {
    let r = Reuse::new(1 << 20);
    let s = r.scope("a");
    compile(&r, "f", "code of f");
    s.commit();
    let kept = r.bytes();
    let s = r.scope("a");
    compile(&r, "g", "code of g");
    assert!(r.bytes() > kept, "a compile under way counts");
    drop(s);
    assert_eq!(r.bytes(), kept);
    let s = r.scope("a");
    assert_eq!(compile(&r, "f", "x"), b"code of f");
    assert_eq!(compile(&r, "g", "x"), b"x");
    s.commit();
}

#[test]
fn the_cap_drops_the_line_compiled_least_recently() {
    let f = cost(&[0; 40]);
    let r = Reuse::new(2 * f + 10);
    for line in ["a", "b"] {
        let s = r.scope(line);
        compile(&r, "f", &"x".repeat(40));
        s.commit();
    }
    assert_eq!(r.bytes(), 2 * f);
    // c needs room: a, compiled least recently, goes.
    let s = r.scope("c");
    compile(&r, "f", &"y".repeat(40));
    s.commit();
    assert_eq!(r.bytes(), 2 * f);
    let s = r.scope("a");
    assert_eq!(compile(&r, "f", "z"), b"z", "a was dropped");
    s.commit();
    let s = r.scope("c");
    assert_eq!(compile(&r, "f", "z"), "y".repeat(40).as_bytes(), "c, compiled last, was kept");
    s.commit();
    // A function over the cap is compiled but not kept, and drops no line for it.
    let before = r.bytes();
    let s = r.scope("d");
    assert!(!r.insert(b"big", vec![0; 2 * f]));
    s.commit();
    assert_eq!(r.bytes(), before);
    // A removed plugin's functions go.
    r.forget("c");
    assert_eq!(r.bytes(), before - f);
}

#[test]
fn a_function_that_cannot_fit_beside_a_compile_under_way_drops_no_line() {
    let f = cost(&[0; 40]);
    let r = Reuse::new(3 * f);
    let s = r.scope("a");
    compile(&r, "f", &"x".repeat(40));
    s.commit();
    let ((begun, has_begun), (end, ended)) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    std::thread::scope(|t| {
        let r = &r;
        t.spawn(move || {
            let s = r.scope("x");
            compile(r, "g", &"x".repeat(40));
            begun.send(()).unwrap();
            ended.recv().unwrap();
            drop(s);
        });
        has_begun.recv().unwrap();
        // x's compile under way holds f, a keeps f: 2f + 10 does not fit even
        // without a, so a stays.
        let s = r.scope("y");
        assert!(!r.insert(b"big", vec![0; 2 * f + 10 - ENTRY]));
        drop(s);
        end.send(()).unwrap();
    });
    let s = r.scope("a");
    assert_eq!(compile(&r, "f", "z"), "x".repeat(40).as_bytes(), "a was dropped for nothing");
    s.commit();
}

/// A component holding one core module whose functions add `consts` to their
/// argument, one function per constant.
fn component(consts: &[u8]) -> Vec<u8> {
    let section = |id: u8, body: Vec<u8>| [vec![id, body.len() as u8], body].concat();
    let n = consts.len() as u8;
    let types = section(1, vec![1, 0x60, 1, 0x7f, 1, 0x7f]);
    let funcs = section(3, [vec![n], vec![0; n as usize]].concat());
    // Each body: no locals; local.get 0, i32.const c, i32.add, end.
    let bodies: Vec<u8> = consts.iter().flat_map(|&c| [7, 0, 0x20, 0, 0x41, c & 0x3f, 0x6a, 0x0b]).collect();
    let code = section(10, [vec![n], bodies].concat());
    let module = [b"\0asm\x01\0\0\0".to_vec(), types, funcs, code].concat();
    [b"\0asm\x0d\0\x01\0".to_vec(), section(1, module)].concat()
}

#[test]
fn cranelift_recompiles_only_the_functions_that_changed() {
    use super::super::{Runtime, RuntimeConfig};
    let rt = Runtime::new(RuntimeConfig { max_instances: 2, ..Default::default() }).unwrap();
    let compile = |plugin: &str, consts: &[u8]| {
        let before = rt.reuse.totals();
        rt.compile_optimized(Some(plugin), &component(consts)).unwrap();
        let after = rt.reuse.totals();
        (after.reused - before.reused, after.compiled - before.compiled)
    };
    let (reused, first) = compile("a", &[1, 2, 3, 4]);
    assert_eq!(reused, 0);
    assert!(first >= 4, "each function compiled: {first}");
    // One function changed: it alone is compiled; the three others (and whatever
    // else wasmtime compiles for the module) come from the first compile.
    assert_eq!(compile("a", &[1, 2, 3, 5]), (first - 1, 1));
    // The same code for another plugin: compiled afresh.
    assert_eq!(compile("b", &[1, 2, 3, 5]), (0, first));
    // Off: nothing kept, nothing reused.
    let off = Runtime::new(RuntimeConfig { max_instances: 2, reuse_max_bytes: 0, ..Default::default() }).unwrap();
    for _ in 0..2 {
        off.compile_optimized(Some("a"), &component(&[1, 2])).unwrap();
    }
    assert_eq!((off.reuse.totals(), off.reuse.bytes()), (Counts::default(), 0));
}
