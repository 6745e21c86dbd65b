//! Kruise's calculator tables (`pkg/util/calculator/calculator_test.go`), ported.

use super::*;

fn show(v: &Val) -> String {
    match v {
        Val::Num(n) => g(*n),
        Val::Q(q) => q.to_string(),
    }
}

fn with(vars: &[(&str, &str)], expr: &str) -> Result<String, String> {
    let vars = vars
        .iter()
        .map(|(k, v)| {
            let val = match v.parse::<f64>() {
                Ok(n) if !v.ends_with('.') => Val::Q(Quantity::from_milli(go_int64(n * 1000.0), Format::DecimalSI)),
                _ => Val::Q(Quantity::parse(v).unwrap()),
            };
            (k.to_string(), val)
        })
        .collect();
    eval(expr, &vars).map(|v| show(&v))
}

fn ok(expr: &str) -> String {
    with(&[], expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn err(expr: &str) -> String {
    with(&[], expr).expect_err(expr)
}

#[test]
fn numbers_and_arithmetic() {
    for (e, want) in [
        ("2 + 3", "5"),
        ("10 - 4", "6"),
        ("3 * 4", "12"),
        ("15 / 3", "5"),
        ("(2 + 3) * 4", "20"),
        ("50%", "0.5"),
        ("100% * 2", "2"),
        ("100.5%", "1.005"),
        ("max(10, 20)", "20"),
        ("min(10, 20)", "10"),
        ("1e2", "100"),
        ("1E2", "100"),
        ("min(max(max(max(0.5,0.5*0.5),0.5-1.0),0.5-1.0),3.0)", "0.5"),
        ("2+3+4/2", "7"),
        ("2   +   3", "5"),
        ("2\t+\t3", "5"),
        ("  2  \t  +  \n  3  ", "5"),
        ("max(  10  ,  20  )", "20"),
        ("8/2/2", "2"),
        ("2-3+4", "3"),
        ("7/2*2", "7"),
        ("10+-5", "5"),
        ("10--5", "15"),
        ("10 - -5", "15"),
        ("20+-10+5", "15"),
        ("--5", "5"),
        ("-(-5)", "5"),
        ("1e3", "1000"),
        ("1e+3", "1000"),
        ("1E+3", "1000"),
        ("1e-3", "0.001"),
        ("1.5e2", "150"),
        ("2.5E+1", "25"),
        ("1e3 + 2e2", "1200"),
        ("1e3+-200", "800"),
        (".5 + .5", "1"),
        ("1.5+2", "3.5"),
        ("max (1,2)", "2"),
        ("20 - 10", "10"),
        ("10 - 10", "0"),
        ("max(min(max(10, 20), 15), 25)", "25"),
        ("max(10 + 5, 20 - 5) * 2", "30"),
        ("50% * 200", "100"),
        // Malformed numbers read as 0, as in Kruise.
        ("1e", "0"),
        ("1e+", "0"),
        ("2cpu", "0"),
        ("100K", "0"),
        ("2Mi + 100n", "2Mi"),
    ] {
        assert_eq!(ok(e), want, "{e}");
    }
}

#[test]
fn quantities() {
    for (e, want) in [
        ("40m + 20m", "60m"),
        ("100Mi - 50Mi", "50Mi"),
        ("2 * 40m", "80m"),
        ("100m / 2", "50m"),
        ("100m", "100m"),
        ("max(40m, 20)", "20"),
        ("min(40m, 20m)", "20m"),
        ("min(max(max(max(500m,0.5*0.5),0.5-1.0),0.5-1.0),3.0)", "500m"),
        ("0m + 0m", "0"),
        ("1000Gi + 500Gi", "1500Gi"),
        ("1.5Gi * 2", "3Gi"),
        ("1Gi + 100Mi", "1124Mi"),
        ("max(100m, 100m)", "100m"),
        ("(100m + 50m) * 2 - 50m", "250m"),
        ("max(100m * 50%, 30m)", "50m"),
        ("max(100m, min(200m, 150m)) + 50m", "200m"),
        ("200m * 50%", "100m"),
        ("1G + 1Gi", "2073741824"),
        ("1Gi/3", "357913941333m"),
        ("1Ki*0.5", "512"),
        (".5Gi", "512Mi"),
        ("10m/3", "3m"),
        ("1m*0.5", "0"),
        ("1k", "1k"),
        ("1Pi", "1Pi"),
    ] {
        assert_eq!(ok(e), want, "{e}");
    }
}

#[test]
fn variables() {
    for (vars, e, want) in [
        (vec![("cpu", "100m")], "cpu", "100m"),
        (vec![("cpu", "50m")], "cpu * 2", "100m"),
        (vec![("cpu", "100m")], "max(cpu, 200m)", "200m"),
        (vec![("cpu", "0.5")], "min(max(max(max(0.5,0.5*cpu),cpu-1.0),cpu-1.0),3.0)", "500m"),
        (vec![("cpu", "100m")], "max(0.25, cpu)", "250m"),
        (vec![("cpu", "500m")], "max(cpu, 0.75)", "750m"),
        (vec![("cpu", "1.0")], "min(0.8, cpu)", "800m"),
        (vec![("cpu", "2.0")], "min(cpu, 1.5)", "1500m"),
        (vec![("cpu", "1.5")], "max(min(2*cpu,-cpu+3.0),2*cpu-3.0)", "1500m"),
        (vec![("cpu", "1.5")], "max(min(2*cpu,3.0-cpu),2*cpu-3.0)", "1500m"),
        (vec![("memory", "200Mi")], "memory + 100Mi", "300Mi"),
        (vec![("memory", "8Gi")], "0.5 * memory + max(0, memory-2Gi)", "10Gi"),
        (vec![("cpu", "200m")], "max(cpu * 50%, 50m)", "100m"),
        (vec![("cpu", "100m")], "cpu*29%", "28m"),
        (vec![("cpu", "100m")], "cpu*0.29", "28m"),
        (vec![("cpu", "333m")], "cpu*1.5", "499m"),
        (vec![("cpu", "100m")], "CPU*2", "200m"),
        (vec![("memory", "1Gi")], "memory*0.3", "322122547200m"),
        (vec![("memory", "1G")], "memory*1.5", "1500M"),
        (vec![("memory", "512Mi")], "max(memory*50%, 100Mi)", "256Mi"),
    ] {
        assert_eq!(with(&vars, e).unwrap_or_else(|x| panic!("{e}: {x}")), want, "{e}");
    }
}

#[test]
fn errors_name_the_cause() {
    for (e, want) in [
        ("10 / 0", "division by zero"),
        ("40m * 2m", "multiplication of two quantities"),
        ("2 / 40m", "division by quantity"),
        ("unknown(1, 2)", "unknown function: unknown"),
        ("max(10)", "max function requires exactly 2 arguments, got 1"),
        ("undefined_var", "undefined variable: undefined_var"),
        ("-10", "calculation result is negative: -10"),
        ("-100m", "calculation result is negative: -100m"),
        ("10 - 20", "negative"),
        ("50m - 100m", "calculation result is negative: -50m"),
        ("1/0 + 2m*2m", "multiplication of two quantities"),
        ("2m*2m + 1/0", "division by zero"),
        ("1m * 1e300", "calculation result is negative: -9223372036854775808m"),
        ("1e3m", "quantities must match"),
        ("", "parse error: syntax error at line 1, col 1"),
        ("+1", "parse error: syntax error"),
    ] {
        let got = err(e);
        assert!(got.contains(want), "{e}: want {want:?}, got {got:?}");
    }
    for e in [
        "   ",
        "2 + @",
        "(2 + 3",
        "()",
        "5..5",
        "5%%",
        "max()",
        "max(10, 20, 30)",
        "max(10, 20 / 0)",
        "max(10, unknown(20, 30))",
        "1e3e2",
        "1eKi",
        "1Ei",
        "50 %",
        "cpu +*/ 50%",
    ] {
        assert!(with(&[("cpu", "1")], e).is_err(), "{e} should fail");
    }
    assert!(with(&[("cpu", "50m")], "cpu - 100m").unwrap_err().contains("negative"));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("{}1{}", "(".repeat(50_000), ")".repeat(50_000));
    assert!(err(&deep).contains("nests deeper than 100"), "parentheses");
    assert!(err(&format!("{}1", "-".repeat(50_000))).contains("nests deeper"), "unary minus");
    assert_eq!(ok(&format!("{}1{}", "(".repeat(50), ")".repeat(50))), "1", "ordinary nesting still parses");
}
