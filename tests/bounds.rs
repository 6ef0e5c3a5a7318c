//! Resource bounds: sizes and counts a file merely claims are refused from
//! the numbers (a finding naming the field), never allocated, and the peak
//! resident memory of the CLI process auditing any of them, or a file at
//! each format's limits, stays under 256 MiB (measured with `wait4`).
#![cfg(unix)]

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bundles;
use serde_json::Value;

const MIB: u64 = 1 << 20;
const RSS_BOUND: u64 = 256 * MIB;

struct Measured {
    code: i32,
    report: Value,
    stderr: String,
    max_rss: u64,
}

/// Runs `audit --json` on `target` and returns its report and the peak
/// resident set of that one process (ru_maxrss of `wait4` on its pid).
// The child is reaped by `wait4` below, which clippy does not see.
#[allow(clippy::zombie_processes)]
fn audit_measured(target: &Path) -> Measured {
    use std::io::Read;
    reset_peak();
    let mut child = Command::new(common::bin())
        .args(["audit", target.to_str().unwrap(), "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value to be filled in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our own child; status and usage are valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break (status, usage);
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("audit of {} hung", target.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let stdout = o.join().unwrap();
    let stderr = e.join().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    // Linux reports ru_maxrss in KiB.
    Measured {
        code,
        report,
        stderr,
        max_rss: usage.ru_maxrss as u64 * 1024,
    }
}

/// Audits, asserts the peak memory bound and that an error finding of
/// `check` says `needle`.
fn refused(target: &Path, check: &str, needle: &str) -> Measured {
    let m = audit_measured(target);
    assert!(
        m.max_rss < RSS_BOUND,
        "{}: peak RSS {} MiB",
        target.display(),
        m.max_rss / MIB
    );
    assert_eq!(m.code, 1, "{:#}\n{}", m.report, m.stderr);
    let hits = common::findings_of(&m.report, check);
    assert!(
        hits.iter()
            .any(|f| f["severity"] == "error" && f["message"].as_str().unwrap().contains(needle)),
        "{check} / {needle}: {:#}",
        m.report["findings"]
    );
    m
}

fn safetensors_file(entries: usize, bytes_each: u64) -> Vec<u8> {
    let mut h = String::from("{");
    for i in 0..entries {
        if i > 0 {
            h.push(',');
        }
        let (b, e) = (i as u64 * bytes_each, (i as u64 + 1) * bytes_each);
        h.push_str(&format!(
            "\"t{i}\":{{\"dtype\":\"U8\",\"shape\":[{bytes_each}],\"data_offsets\":[{b},{e}]}}"
        ));
    }
    h.push('}');
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    out.resize(out.len() + entries * bytes_each as usize, 0);
    out
}

fn gguf_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A GGUF v3 file of `n` F32 [1] tensors, 32 bytes apart, no key/values,
/// written here from the format's layout.
fn gguf_tensors(n: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    for i in 0..n {
        gguf_string(&mut out, &format!("t{i}"));
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&1u64.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // F32
        out.extend_from_slice(&(i * 32).to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(32) + 32 * n as usize, 0);
    out
}

/// A GGUF header with one key/value: `value_type` then `value` bytes.
fn gguf_kv(key: &str, value: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    gguf_string(&mut out, key);
    out.extend_from_slice(value);
    out
}

#[test]
fn safetensors_header_claiming_2_pow_62_bytes() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut f = (1u64 << 62).to_le_bytes().to_vec();
    f.extend_from_slice(b"{}      ");
    fs::write(tmp.path().join("model.safetensors"), f).unwrap();
    refused(tmp.path(), "shard.header", "over the 100000000-byte limit");
}

#[test]
fn safetensors_tensor_claiming_2_pow_62_bytes() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let h = format!(
        "{{\"a\":{{\"dtype\":\"U8\",\"shape\":[{0}],\"data_offsets\":[0,{0}]}}}}",
        1u64 << 62
    );
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(h.as_bytes());
    f.extend_from_slice(&[0; 16]);
    fs::write(tmp.path().join("model.safetensors"), f).unwrap();
    refused(tmp.path(), "shard.offsets", "past the end of the file");
}

#[test]
fn gguf_claiming_2_pow_40_tensors() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&(1u64 << 40).to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&[0; 64]);
    let p = tmp.path().join("m.gguf");
    fs::write(&p, f).unwrap();
    refused(&p, "gguf.counts", "1099511627776 tensors");
}

#[test]
fn gguf_string_claiming_2_pow_60_bytes() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut v = 8u32.to_le_bytes().to_vec(); // string
    v.extend_from_slice(&(1u64 << 60).to_le_bytes());
    v.extend_from_slice(b"abc");
    let p = tmp.path().join("m.gguf");
    fs::write(&p, gguf_kv("general.name", &v)).unwrap();
    refused(&p, "gguf.string", "1152921504606846976 bytes");
}

#[test]
fn gguf_array_items_are_bounded() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    // 5 M one-byte items: the file holds them, the reader refuses them.
    let n = 5_000_000u64;
    let mut v = 9u32.to_le_bytes().to_vec(); // array
    v.extend_from_slice(&0u32.to_le_bytes()); // of u8
    v.extend_from_slice(&n.to_le_bytes());
    v.resize(v.len() + n as usize, 7);
    let p = tmp.path().join("m.gguf");
    fs::write(&p, gguf_kv("x.arr", &v)).unwrap();
    refused(&p, "gguf.counts", "at most 1048576 array items");
}

#[test]
fn a_million_tiny_tensors_are_refused_from_the_count() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("model.safetensors"),
        safetensors_file(1_000_000, 1),
    )
    .unwrap();
    refused(tmp.path(), "shard.header", "more than 32768 entries");
    let p = tmp.path().join("m.gguf");
    fs::write(&p, gguf_tensors(1_000_000)).unwrap();
    refused(&p, "gguf.counts", "1000000 tensors");
}

/// At the limits the audit runs to a valid verdict, still under the bound.
#[test]
fn files_at_the_limits_audit_within_the_memory_bound() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let st = tmp.path().join("st");
    fs::create_dir(&st).unwrap();
    fs::write(st.join("model.safetensors"), safetensors_file(32_768, 1)).unwrap();
    let gguf = tmp.path().join("m.gguf");
    fs::write(&gguf, gguf_tensors(32_768)).unwrap();
    // A million one-byte strings in one array (the items limit).
    let n = 1u64 << 20;
    let mut v = 9u32.to_le_bytes().to_vec();
    v.extend_from_slice(&8u32.to_le_bytes());
    v.extend_from_slice(&n.to_le_bytes());
    for _ in 0..n {
        v.extend_from_slice(&1u64.to_le_bytes());
        v.push(b'a');
    }
    let strings = tmp.path().join("s.gguf");
    fs::write(&strings, gguf_kv("tokenizer.ggml.tokens", &v)).unwrap();
    // Dropped before the audits: a measured child counts this process's
    // size at its spawn.
    drop(v);
    for target in [st, gguf, strings] {
        let m = audit_measured(&target);
        assert_eq!(
            m.code,
            0,
            "{}: {:#}",
            target.display(),
            m.report["findings"]
        );
        assert!(
            m.max_rss < RSS_BOUND,
            "{}: peak RSS {} MiB",
            target.display(),
            m.max_rss / MIB
        );
    }
}

/// A checkpoint of 768 MiB (two shards of random valid codes) audits
/// within the bound: nothing after the pass maps the payload whole (the
/// duplicate search's samples once brought about half of every shard into
/// the process through the map, 1.3 GB for 2 GiB).
#[test]
fn a_large_checkpoint_audits_within_the_memory_bound() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    sample(&dir, &["--format", "mlx-lm", "--size-mib", "768"]);
    // The text output: the JSON report, parsed here, would grow this
    // process (see `one_at_a_time`).
    let (code, text, rss) = audit_text_measured(&dir, &[]);
    assert_eq!(code, 0, "{text}");
    assert!(
        rss < RSS_BOUND,
        "768 MiB checkpoint: peak RSS {} MiB",
        rss / MIB
    );
}

/// A checkpoint of 19,998 small tensors (833 layers, stacked experts):
/// each stacked scales tensor's per-expert histogram is made at its first
/// scale, not when its scanner is (128 KiB zeroed for each of thousands of
/// scanners made at once), and the duplicate search keys tensors by a
/// digest of their samples, not the 12 KiB of samples: 532 MiB before,
/// about 165 MiB now.
#[test]
fn twenty_thousand_small_tensors_audit_within_the_memory_bound() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("many");
    sample(
        &dir,
        &["--format", "mlx-lm", "--layers", "833", "--experts", "2"],
    );
    let (code, text, rss) = audit_text_measured(&dir, &[]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("19998"), "{text}");
    assert!(
        rss < RSS_BOUND,
        "19,998 tensors: peak RSS {} MiB",
        rss / MIB
    );
}

#[test]
fn every_sample_audits_within_the_memory_bound() {
    let _one = one_at_a_time();
    for s in bundles::all() {
        let m = audit_measured(&s.target);
        assert_eq!(m.code, 0, "{}", s.name);
        assert!(m.max_rss < RSS_BOUND, "{}: {} MiB", s.name, m.max_rss / MIB);
    }
}

/// JSON nested past any real manifest, config, index or header is refused
/// by the parser's depth limit with a finding, never a stack overflow.
#[test]
fn deep_json_nesting_is_a_finding() {
    let _one = one_at_a_time();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let tmp = tempfile::tempdir().unwrap();
    let a8 = tmp.path().join("a8");
    fs::create_dir(&a8).unwrap();
    fs::write(a8.join("manifest.json"), &deep).unwrap();
    refused(&a8, "manifest.parse", "recursion limit exceeded");

    let nested_object = format!(
        "{{\"format\": \"audio8-mixed-bundle-v2\", \"x\": {}1{}}}",
        "{\"a\":".repeat(50_000),
        "}".repeat(50_000)
    );
    fs::write(a8.join("manifest.json"), &nested_object).unwrap();
    refused(&a8, "manifest.parse", "recursion limit exceeded");

    let ml = tmp.path().join("ml");
    fs::create_dir(&ml).unwrap();
    fs::write(ml.join("config.json"), &deep).unwrap();
    fs::write(ml.join("model.safetensors.index.json"), &deep).unwrap();
    fs::write(ml.join("model.safetensors"), safetensors_file(1, 2)).unwrap();
    refused(&ml, "mlxlm.config", "recursion limit exceeded");
    refused(&ml, "mlxlm.index", "recursion limit exceeded");

    let st = tmp.path().join("st");
    fs::create_dir(&st).unwrap();
    let mut h = deep.clone().into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(&h);
    fs::write(st.join("model.safetensors"), f).unwrap();
    refused(&st, "shard.header", "recursion limit exceeded");
}

/// JSON of tiny values just under the size caps (60 MB of `0,`: thirty
/// million values, gigabytes as a parsed tree) is refused from its value
/// count before any tree is built, within the memory bound.
#[test]
fn json_of_tiny_values_near_the_cap_is_refused_from_its_count() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (a8, ml, st) = (
        tmp.path().join("a8"),
        tmp.path().join("ml"),
        tmp.path().join("st"),
    );
    // Every file written, and the text dropped, before the first audit:
    // a measured child counts this process's size at its spawn.
    {
        let tiny = format!("[{}0]", "0,".repeat(30_000_000));
        fs::create_dir(&a8).unwrap();
        fs::write(a8.join("manifest.json"), &tiny).unwrap();
        fs::create_dir(&ml).unwrap();
        fs::write(ml.join("config.json"), &tiny).unwrap();
        fs::write(ml.join("model.safetensors.index.json"), &tiny).unwrap();
        fs::write(ml.join("model.safetensors"), safetensors_file(1, 2)).unwrap();
        fs::create_dir(&st).unwrap();
        let mut h = tiny.into_bytes();
        h.resize(h.len().next_multiple_of(8), b' ');
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(&h);
        fs::write(st.join("model.safetensors"), f).unwrap();
    }
    refused(&a8, "manifest.parse", "JSON values, over the limit");
    refused(&ml, "mlxlm.config", "JSON values, over the limit");
    refused(&ml, "mlxlm.index", "JSON values, over the limit");
    // The header's entry count (32,768) stops this one first.
    refused(&st, "shard.header", "model.safetensors: header");
}

/// The size caps of the JSON files: a sparse file over the cap is refused
/// by its length (the read stops at the cap), with a message naming it.
#[test]
fn config_and_index_over_their_size_cap() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("model.safetensors"), safetensors_file(1, 2)).unwrap();
    for name in ["config.json", "model.safetensors.index.json"] {
        let f = fs::File::create(tmp.path().join(name)).unwrap();
        f.set_len(65 * MIB).unwrap();
    }
    let m = audit_measured(tmp.path());
    assert!(m.max_rss < RSS_BOUND, "{} MiB", m.max_rss / MIB);
    for check in ["mlxlm.config", "mlxlm.index"] {
        let hits = common::findings_of(&m.report, check);
        assert!(
            hits.iter().any(|f| f["message"]
                .as_str()
                .unwrap()
                .contains("larger than 64 MiB")),
            "{check}: {:#}",
            m.report["findings"]
        );
    }
}

/// `shards` safetensors files of `per` one-byte tensors each, beside each
/// other in `dir` (a checkpoint without an index).
fn shards(dir: &Path, shards: usize, per: usize) {
    fs::create_dir_all(dir).unwrap();
    for s in 0..shards {
        let mut f = safetensors_file(per, 1);
        // Distinct names across the shards: `t{i}` becomes `s{s}.t{i}`
        // by rewriting the header (same length per name, so the offsets
        // and the header length hold).
        let n = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
        let h = String::from_utf8(f[8..8 + n].to_vec()).unwrap();
        let h = h.replace("\"t", &format!("\"{}", char::from(b'a' + s as u8)));
        f[8..8 + n].copy_from_slice(h.as_bytes());
        fs::write(
            dir.join(format!("model-{:05}-of-{shards:05}.safetensors", s + 1)),
            f,
        )
        .unwrap();
    }
}

/// 10^5 tiny tensors over four shards (the most a checkpoint may list in
/// all) audit within the memory bound; one more shard past the limit is
/// refused by the count, not read, and stays within it too. The text
/// output is read here, not the JSON: a test process that parsed a report
/// of 10^5 tensors would be the large one, and a child forked from it
/// starts with its size (ru_maxrss counts from the fork).
#[test]
fn a_hundred_thousand_tensors_over_many_shards() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let four = tmp.path().join("four");
    shards(&four, 4, 25_000);
    let (code, text, rss) = audit_text_measured(&four, &[]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("100000"), "{text}");
    assert!(rss < RSS_BOUND, "10^5 tensors: peak RSS {} MiB", rss / MIB);
    // The Markdown report builds its tensor table whole: still bounded.
    let (code, md, rss) = audit_text_measured(&four, &["--markdown"]);
    assert_eq!(code, 0);
    assert!(
        md.starts_with("# bundlescope audit"),
        "{}",
        &md[..md.len().min(300)]
    );
    assert!(
        rss < RSS_BOUND,
        "10^5 tensors, Markdown: peak RSS {} MiB",
        rss / MIB
    );

    let five = tmp.path().join("five");
    shards(&five, 5, 25_000);
    let (code, text, rss) = audit_text_measured(&five, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("[shard.header] model-00005-of-00005.safetensors and the 0 shards after it are not indexed")
            && text.contains("more than 100000 tensors in all"),
        "{text}"
    );
    assert!(
        rss < RSS_BOUND,
        "past the limit: peak RSS {} MiB",
        rss / MIB
    );
}

/// The same limit over an mlx-nvfp4 artifact's shards (its manifest
/// lists them, and a weight map names every tensor): five shards of
/// 25,000 tensors each, the fifth refused by the count and not indexed.
#[test]
fn an_nvfp4_artifact_past_the_tensor_limit_over_its_shards() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nv");
    shards(&dir, 5, 25_000);
    // Written as text: a JSON tree of 125,000 entries would grow this
    // test process, and children forked from it start with its size.
    let file = |s: u8| format!("model-{:05}-of-00005.safetensors", s + 1);
    let mut manifest = String::from(
        r#"{"quantization": {"mode": "nvfp4", "bits": 4, "group_size": 16, "layout": "stacked-global-scale"}, "shards": ["#,
    );
    let listed: Vec<String> = (0..5)
        .map(|s| format!(r#"{{"file": "{}"}}"#, file(s)))
        .collect();
    manifest.push_str(&listed.join(", "));
    manifest.push_str(r#"], "weight_map": {"#);
    for s in 0..5u8 {
        for i in 0..25_000 {
            if s + u8::from(i > 0) > 0 {
                manifest.push_str(", ");
            }
            manifest.push_str(&format!(r#""{}{i}": "{}""#, char::from(b'a' + s), file(s)));
        }
    }
    manifest.push_str("}}");
    fs::write(dir.join("manifest.json"), manifest).unwrap();
    let (code, text, rss) = audit_text_measured(&dir, &[]);
    assert_eq!(code, 1, "{}", &text[..text.len().min(2000)]);
    assert!(
        text.contains("[shard.header] model-00005-of-00005.safetensors and the 0 shards after it are not indexed")
            && text.contains("more than 100000 tensors in all (100000 before it)"),
        "{}",
        &text[..text.len().min(4000)]
    );
    // Their U8 tensors: 100 named, the rest counted in one warning.
    assert_eq!(text.matches("not a float dtype").count(), 100);
    assert!(
        text.contains("99900 more tensors outside the experts are not BF16"),
        "{}",
        &text[..text.len().min(4000)]
    );
    // The first four shards' tensors are listed and their weight-map
    // entries found; the fifth's entries are not reported one by one.
    assert!(
        !text.contains("but no shard holds it"),
        "{}",
        &text[..text.len().min(4000)]
    );
    assert!(rss < RSS_BOUND, "peak RSS {} MiB", rss / MIB);
}

/// These tests run one at a time: a child's peak RSS counts the test
/// process's own size at the spawn (the child shares this process's
/// memory until its exec, which keeps the larger high-water mark), so
/// tests building large inputs beside each other would be measured in
/// each other's children.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Resets this process's high-water mark to its present size just before
/// a measured child is spawned (Linux: `clear_refs` 5), so an earlier
/// test's inputs, freed since, are not counted in the child's peak.
fn reset_peak() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// Writes `bundlescope sample DIR ARGS…`.
fn sample(dir: &Path, args: &[&str]) {
    let out = Command::new(common::bin())
        .arg("sample")
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `audit` (text, or `extra` flags) on `target`: exit code, stdout and the peak RSS.
// The child is reaped by `wait4` below, which clippy does not see.
#[allow(clippy::zombie_processes)]
fn audit_text_measured(target: &Path, extra: &[&str]) -> (i32, String, u64) {
    use std::io::Read;
    reset_peak();
    let mut child = Command::new(common::bin())
        .args(["audit", target.to_str().unwrap()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be filled in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own child; status and usage are valid pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, o.join().unwrap(), usage.ru_maxrss as u64 * 1024)
}
