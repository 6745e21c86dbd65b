//! Kruise's tables (`sidecarset_resources_test.go`, `sidecarset_resources_policy_test.go`
//! and the e2e specs' sizes), ported.

use super::*;
use crate::types::{ResourceExprs, ResourcesExpr};

/// A container with limits (cpu, memory) and requests (cpu, memory); "" leaves one out.
fn c(name: &str, lim: (&str, &str), req: (&str, &str)) -> Value {
    let map = |(cpu, mem): (&str, &str)| {
        let mut m = Map::new();
        if !cpu.is_empty() {
            m.insert("cpu".into(), json!(cpu));
        }
        if !mem.is_empty() {
            m.insert("memory".into(), json!(mem));
        }
        Value::Object(m)
    };
    json!({"name": name, "resources": {"limits": map(lim), "requests": map(req)}})
}

fn exprs(cpu: &str, mem: &str) -> Option<ResourceExprs> {
    let s = |x: &str| (!x.is_empty()).then(|| x.to_owned());
    Some(ResourceExprs { cpu: s(cpu), memory: s(mem) })
}

fn policy(mode: &str, regex: &str, lim: (&str, &str), req: (&str, &str)) -> ResourcesPolicy {
    ResourcesPolicy {
        target_containers_mode: mode.into(),
        target_containers_name_regex: Some(regex.into()),
        resources_expr: ResourcesExpr { limits: exprs(lim.0, lim.1), requests: exprs(req.0, req.1) },
    }
}

/// The result as ((limit cpu, limit memory), (request cpu, request memory)), "–" for none.
fn sized(p: &ResourcesPolicy, pod: &Value) -> ((String, String), (String, String)) {
    let r = compute(p, &candidates(pod, &[])).unwrap();
    let get = |k: &str, res: &str| r[k][res].as_str().unwrap_or("–").to_owned();
    ((get("limits", "cpu"), get("limits", "memory")), (get("requests", "cpu"), get("requests", "memory")))
}

fn pod(containers: Vec<Value>) -> Value {
    json!({"spec": {"containers": containers}})
}

fn want(l: (&str, &str), r: (&str, &str)) -> ((String, String), (String, String)) {
    ((l.0.into(), l.1.into()), (r.0.into(), r.1.into()))
}

#[test]
fn apply_resources_policy_as_kruise() {
    let app1 = c("app1", ("200m", "200Mi"), ("50m", "100Mi"));
    let app2 = c("app2", ("400m", "400Mi"), ("100m", "200Mi"));
    let half = ("cpu*50%", "200Mi");
    let half_r = ("cpu*50%", "100Mi");
    assert_eq!(
        sized(&policy(SUM, ".*", half, half_r), &pod(vec![app1.clone(), app2.clone()])),
        want(("300m", "200Mi"), ("75m", "100Mi"))
    );

    let v4 = c("large.engine.v4", ("200m", "200Mi"), ("50m", "100Mi"));
    let v8 = c("large.engine.v8", ("400m", "400Mi"), ("100m", "200Mi"));
    let floor = ("max(cpu*50%, 50m)", "200Mi");
    let floor_r = ("max(cpu*50%, 50m)", "100Mi");
    let both = pod(vec![v4, v8]);
    assert_eq!(
        sized(&policy(MAX, "^large.engine.v.*$", floor, floor_r), &both),
        want(("200m", "200Mi"), ("50m", "100Mi"))
    );
    assert_eq!(
        sized(&policy(SUM, "^large.engine.v4$", floor, floor_r), &both),
        want(("100m", "200Mi"), ("50m", "100Mi"))
    );
    let e = compute(&policy(SUM, "^nonexistent$", floor, floor_r), &candidates(&pod(vec![app1]), &[])).unwrap_err();
    assert_eq!(e, "no containers match the regex pattern \"^nonexistent$\"");

    // A target without a cpu limit: the sidecar has none either.
    let a = c("app1", ("200m", "200Mi"), ("100m", "100Mi"));
    let b = c("app2", ("", "400Mi"), ("50m", "200Mi"));
    let p = policy(SUM, ".*", ("cpu*50%", "memory*30%"), ("cpu*30%", "memory*20%"));
    assert_eq!(sized(&p, &pod(vec![a.clone(), b])), want(("–", "180Mi"), ("45m", "60Mi")));
    let b = c("app2", ("400m", ""), ("200m", ""));
    let p = policy(MAX, ".*", ("cpu*40%", "memory*30%"), ("cpu*25%", "memory*20%"));
    assert_eq!(sized(&p, &pod(vec![a.clone(), b])), want(("160m", "–"), ("50m", "20Mi")));
    // A target without requests counts 0.
    let b = c("app2", ("400m", "400Mi"), ("", ""));
    let p = policy(SUM, ".*", ("cpu*50%", "memory*30%"), ("cpu*30%", "memory*20%"));
    assert_eq!(sized(&p, &pod(vec![a, b])), want(("300m", "180Mi"), ("30m", "20Mi")));

    // Native-sidecar init containers are targets; plain ones are not.
    let mut native = c("app1", ("400m", "800Mi"), ("200m", "400Mi"));
    native["restartPolicy"] = json!("Always");
    let plain = c("app2", ("400m", "800Mi"), ("200m", "400Mi"));
    let p = json!({"spec": {"initContainers": [native, plain], "containers": [c("app2", ("600m", "1200Mi"), ("300m", "600Mi"))]}});
    let pol = policy(SUM, "^app.*$", ("max(cpu*30%, 50m)", "max(memory*25%, 100Mi)"), ("cpu*20%", "memory*15%"));
    assert_eq!(sized(&pol, &p), want(("300m", "500Mi"), ("100m", "150Mi")));
}

#[test]
fn e2e_sizes_as_kruise() {
    let a = c("app1", ("200m", "400Mi"), ("100m", "200Mi"));
    let b = c("app2", ("400m", "600Mi"), ("200m", "300Mi"));
    let p =
        policy(SUM, ".*", ("cpu*50% + 100m", "max(memory*20% + 100Mi, 200Mi)"), ("cpu*30% + 50m", "memory*15% + 50Mi"));
    assert_eq!(sized(&p, &pod(vec![a, b])), want(("400m", "300Mi"), ("140m", "125Mi")));
}

#[test]
fn targets_leave_out_the_sidecars_of_every_set_injected() {
    let ss: SidecarSet = serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {
        "initContainers": [{"name": "init-sidecar1"}], "containers": [{"name": "sidecar1"}]}}))
    .unwrap();
    let p = json!({"spec": {
        "initContainers": [{"name": "init-sidecar1", "restartPolicy": "Always"}, {"name": "plain-init-container"},
                           {"name": "sidecar-container", "restartPolicy": "Always"}],
        "containers": [{"name": "app1"}, {"name": "app2"}, {"name": "sidecar1"}]}});
    let names: Vec<&str> = candidates(&p, &[&ss]).iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["sidecar-container", "app1", "app2"]);
}

#[test]
fn expressions_bind_one_variable_as_kruise() {
    let q = |s: &str| Quantity::parse(s).unwrap();
    for (expr, value, result) in [
        ("cpu*50%", "200m", "100m"),
        ("memory*30%", "600Mi", "180Mi"),
        ("max(cpu*50%, 100m)", "150m", "100m"),
        ("max(cpu*50%, 100m)", "400m", "200m"),
        ("cpu + 50m", "100m", "150m"),
        ("max(memory*20% + 100Mi, 200Mi)", "800Mi", "260Mi"),
        ("500m", "100m", "500m"),
        ("1Gi", "500Mi", "1Gi"),
        ("memory*25%", "400Mi", "100Mi"),
        ("1", "2", "1"),
        ("1", "2Mi", "1"),
        ("0.5", "2Mi", "500m"),
    ] {
        assert_eq!(evaluate(expr, q(value)).unwrap().to_string(), result, "{expr} with {value}");
    }
    assert!(evaluate("cpu * invalid", q("100m")).is_err());
    assert!(evaluate("cpu*memory", q("1")).unwrap_err().contains("undefined variable: cpu"));
    assert!(evaluate("MEMORY*2", q("1")).unwrap_err().contains("undefined variable: memory"));
    assert!(has_word("a memory b", "memory") && has_word("memory", "memory"));
    assert!(!has_word("memory_x", "memory") && !has_word("xmemory", "memory"));
}

#[test]
fn validation_as_kruise() {
    let count = |p: &ResourcesPolicy, c: &Value, init: bool| {
        let mut errs = Vec::new();
        validate(p, "spec.containers[0]", init, c, &mut errs);
        errs
    };
    let plain = json!({"name": "s"});
    let ok = [
        policy(
            SUM,
            "^app.*$",
            ("max(cpu*50%, 50m)", "max(memory*50%, 100Mi)"),
            ("max(cpu*50%, 50m)", "max(memory*50%, 100Mi)"),
        ),
        policy(MAX, "^app.*$", ("cpu*50%", ""), ("", "")),
        policy(SUM, ".*", ("", ""), ("max(cpu*50%, 50m)", "100Mi")),
        policy(SUM, ".*", ("0.5*cpu - 0.3*max(0, cpu-4) + 0.3*max(0, cpu-8)", "max(memory*50%, 100Mi)"), ("", "")),
        policy(MAX, "^.*", ("", "memory*50%"), ("", "")),
        policy(SUM, ".*", ("max( cpu * 0.5 , 50m )", ""), ("", "")),
        policy(SUM, ".*", ("max(min(cpu*50%, 100m), 50m)", ""), ("", "")),
        policy(SUM, ".*", ("cpu - 100m", ""), ("", "")),
    ];
    for p in &ok {
        assert_eq!(count(p, &plain, false), Vec::<String>::new(), "{p:?}");
    }
    let l = |cpu: &str, mem: &str| policy(SUM, ".*", (cpu, mem), ("", ""));
    let bad: Vec<(ResourcesPolicy, &str)> = vec![
        (policy(SUM, "", ("cpu*50%", ""), ("", "")), "targetContainersNameRegex: invalid empty regex"),
        (policy(SUM, "[invalid(regex", ("cpu*50%", ""), ("", "")), "invalid regex pattern"),
        (
            ResourcesPolicy { resources_expr: ResourcesExpr::default(), ..l("x", "") },
            "at least one of limits or requests",
        ),
        (l("invalid expression @#$", ""), "limits.cpu: invalid expression: undefined variable: invalid"),
        (l("max(cpu*50%, 50m", ""), "limits.cpu: invalid expression"),
        (l("max(cpu*50%)", ""), "max function requires exactly 2 arguments, got 1"),
        (l("invalidvar * 50%", ""), "undefined variable: invalidvar"),
        (l("memory*2", ""), "limits.cpu: invalid expression: undefined variable: memory"),
        (l("", "cpu*2"), "limits.memory: invalid expression: undefined variable: cpu"),
        (l("cpu - 2", ""), "calculation result is negative: -1"),
        (l("", "memory - 100Mi"), "calculation result is negative: -104857599"),
        (l("cpu/0", ""), "division by zero"),
        (policy(SUM, ".*", ("", ""), ("invalid_cpu_expr", "")), "requests.cpu: invalid expression"),
        (policy(SUM, ".*", ("", ""), ("", "bad_memory_expr")), "requests.memory: invalid expression"),
        (policy("avg", ".*", ("cpu", ""), ("", "")), "targetContainersMode: unsupported value \"avg\""),
    ];
    for (p, want) in bad {
        let errs = count(&p, &plain, false);
        assert!(errs.len() == 1 && errs[0].contains(want), "want {want:?}, got {errs:?}");
    }
    let with_resources = json!({"name": "s", "resources": {"requests": {"cpu": "50m"}}});
    let errs = count(&policy(SUM, "", ("cpu", ""), ("", "")), &with_resources, false);
    assert_eq!(
        errs,
        ["spec.containers[0].resourcesPolicy: resourcesPolicy and resources cannot be configured together"]
    );
    let errs = count(&l("cpu*50%", ""), &plain, true);
    assert_eq!(
        errs,
        [
            "spec.containers[0].resourcesPolicy: resourcesPolicy is only supported for containers with RestartPolicy Always"
        ]
    );
    assert!(count(&l("cpu*50%", ""), &json!({"name": "s", "restartPolicy": "Always"}), true).is_empty());
}
