//! A call that grows its memory past `cpu::BIG_GROWTH` goes aside at that grow, before
//! its next instruction; a small grow stays in place. Against real wasm: a module that
//! grows its memory and then asks the host where it runs.

use super::*;
use crate::runtime::aside::Aside;
use crate::runtime::budget::MemoryBudget;
use crate::runtime::cpu::{BIG_GROWTH, Cpu, Metered};
use crate::runtime::niced::Priority;
use std::sync::Mutex;

/// `(module (import "h" "where" (func)) (memory 1)
///   (func (export "run") (param i32) (drop (memory.grow (local.get 0))) (call 0)))`:
/// grows its memory by the pages it is given, then calls the host.
const GROW_THEN_ASK: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    0x01, 0x08, 0x02, 0x60, 0x00, 0x00, 0x60, 0x01, 0x7f, 0x00, // types: () -> (), (i32) -> ()
    0x02, 0x0b, 0x01, 0x01, b'h', 0x05, b'w', b'h', b'e', b'r', b'e', 0x00, 0x00, // import h.where
    0x03, 0x02, 0x01, 0x01, // one function of type 1
    0x05, 0x03, 0x01, 0x00, 0x01, // memory: 1 page
    0x07, 0x07, 0x01, 0x03, b'r', b'u', b'n', 0x00, 0x01, // export "run"
    0x0a, 0x0b, 0x01, 0x09, 0x00, 0x20, 0x00, 0x40, 0x00, 0x1a, 0x10, 0x00, 0x0b, // body
];

/// Runs `GROW_THEN_ASK` growing by `bytes` as one metered call that may move aside;
/// the names of the threads where it began and where it asked after its grow.
async fn grow(bytes: usize) -> (String, String) {
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::new(&engine, GROW_THEN_ASK).unwrap();
    let cpu = Cpu::new();
    let meter = Meter::new(&cpu, "p".into());
    let aside = Aside::new(1, Priority::Nice(0));
    let charge = MemoryBudget::unbounded().reserve("p".into(), 0).await;
    let asked = Arc::new(Mutex::new(String::new()));
    let (m, a) = (meter.clone(), asked.clone());
    let call = Box::pin(Metered::new(
        async move {
            let began = name();
            let mut limits = Tracked::new(256 << 20, charge);
            limits.metered_by(m);
            let mut store = wasmtime::Store::new(&engine, limits);
            store.limiter_async(|t| t as &mut dyn ResourceLimiterAsync);
            let mut linker = wasmtime::Linker::new(&engine);
            linker.func_wrap("h", "where", move || *a.lock().unwrap() = name()).unwrap();
            let instance = linker.instantiate_async(&mut store, &module).await.unwrap();
            let run = instance.get_typed_func::<i32, ()>(&mut store, "run").unwrap();
            run.call_async(&mut store, (bytes / 65536) as i32).await.unwrap();
            assert_eq!(store.data().peak(), bytes + 65536, "the grow was allowed");
            began
        },
        meter.clone(),
    ));
    let began = aside.run(call, meter).await.expect("the call ran to its end");
    let asked = asked.lock().unwrap().clone();
    (began, asked)
}

fn name() -> String {
    std::thread::current().name().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_call_that_grows_big_runs_aside_before_it_touches_the_memory() {
    let (began, asked) = grow(BIG_GROWTH * 2).await;
    assert_ne!(began, "wasmop-aside", "a call starts where it was called");
    assert_eq!(asked, "wasmop-aside", "after a big grow, its next instruction ran aside");
}

#[tokio::test]
async fn a_call_that_grows_a_little_stays_in_place() {
    let (began, asked) = grow(BIG_GROWTH / 8).await;
    assert_eq!(asked, began, "a small grow keeps the call where it began");
}
