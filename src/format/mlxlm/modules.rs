//! The quantization block of an MLX-LM config and the quantized modules of
//! the checkpoint: which tensors form a module, the bits, group size and
//! mode each has (its per-module entry, else the global block), and whether
//! the shapes agree. Valid modules get layouts; every other float tensor is
//! dense.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::finding::Finding;
use crate::finding::checks as c;
use crate::format::{DenseDtype, Layout, Precision, QuantMode, QuantNote, ScaleKind, TensorInfo};

/// Most experts one stacked module may hold.
pub const MAX_EXPERTS: u64 = 4096;

/// One module's quantization parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Mode.
    pub mode: QuantMode,
    /// Bits per code.
    pub bits: u8,
    /// Inputs per scale.
    pub group: u64,
}

impl Params {
    /// Why these parameters are not ones MLX quantizes with, if they are not.
    pub fn invalid(self) -> Option<String> {
        match self.mode.fixed() {
            Some((bits, group)) if (self.bits, self.group) != (bits, group) => Some(format!(
                "mode {} needs bits {bits} and group_size {group}, not bits {} and group_size {}",
                self.mode.as_str(),
                self.bits,
                self.group
            )),
            Some(_) => None,
            None if ![2, 3, 4, 5, 6, 8].contains(&self.bits) => Some(format!(
                "affine bits must be 2, 3, 4, 5, 6 or 8, not {}",
                self.bits
            )),
            None if ![32, 64, 128].contains(&self.group) => Some(format!(
                "affine group_size must be 32, 64 or 128, not {}",
                self.group
            )),
            None => None,
        }
    }
}

/// A per-module entry of the quantization block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Entry {
    /// `false`: the module stays dense.
    Dense,
    /// An object: the module is quantized with these parameters.
    Quantized {
        /// Its parameters (missing keys from the global block).
        params: Params,
        /// `global_scale: true` (nvfp4 stacked layers).
        global_scale: bool,
    },
}

/// The parsed quantization block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The global parameters.
    pub global: Params,
    /// Per-module entries by module path.
    pub entries: BTreeMap<String, Entry>,
}

fn int_key(
    o: &serde_json::Map<String, Value>,
    key: &str,
    at: &str,
    findings: &mut Vec<Finding>,
) -> Option<u64> {
    let v = o.get(key)?;
    match v.as_u64().filter(|&n| n > 0 && n <= 1 << 20) {
        Some(n) => Some(n),
        None => {
            findings.push(
                Finding::error(
                    c::MLXLM_CONFIG,
                    format!("config.json {at}.{key} is {v}, expected a positive integer"),
                )
                .field(format!("{at}.{key}")),
            );
            None
        }
    }
}

fn mode_key(
    o: &serde_json::Map<String, Value>,
    at: &str,
    findings: &mut Vec<Finding>,
) -> Result<Option<QuantMode>, ()> {
    let Some(v) = o.get("mode") else {
        return Ok(None);
    };
    match v.as_str().and_then(QuantMode::parse) {
        Some(m) => Ok(Some(m)),
        None => {
            findings.push(
                Finding::error(
                    c::MLXLM_CONFIG,
                    format!(
                        "config.json {at}.mode is {v}, expected \"affine\", \"mxfp4\", \"nvfp4\" or \"mxfp8\""
                    ),
                )
                .field(format!("{at}.mode")),
            );
            Err(())
        }
    }
}

/// Parses the block; `None` when it cannot be used at all (then no module
/// gets a layout, and the finding says why).
pub fn parse_block(q: &Value, findings: &mut Vec<Finding>) -> Option<Block> {
    let Some(o) = q.as_object() else {
        findings.push(
            Finding::error(
                c::MLXLM_CONFIG,
                format!(
                    "config.json's quantization is {}, expected an object with group_size, bits and mode",
                    crate::format::json::kind(q)
                ),
            )
            .field("quantization"),
        );
        return None;
    };
    let mode = mode_key(o, "quantization", findings)
        .ok()?
        .unwrap_or(QuantMode::Affine);
    let (dbits, dgroup) = mode.defaults();
    let bits = int_key(o, "bits", "quantization", findings);
    let group = int_key(o, "group_size", "quantization", findings);
    let global = Params {
        mode,
        bits: u8::try_from(bits.unwrap_or(u64::from(dbits))).unwrap_or(0),
        group: group.unwrap_or(dgroup),
    };
    let mut entries = BTreeMap::new();
    for (key, v) in o {
        let at = format!("quantization[{key:?}]");
        match v {
            Value::Bool(false) => {
                entries.insert(key.clone(), Entry::Dense);
            }
            Value::Bool(true) => {
                entries.insert(
                    key.clone(),
                    Entry::Quantized {
                        params: global,
                        global_scale: false,
                    },
                );
            }
            Value::Object(e) => {
                let Ok(mode) = mode_key(e, &at, findings) else {
                    continue;
                };
                let mode = mode.unwrap_or(global.mode);
                let bits = int_key(e, "bits", &at, findings);
                let group = int_key(e, "group_size", &at, findings);
                let params = Params {
                    mode,
                    bits: u8::try_from(bits.unwrap_or(u64::from(global.bits))).unwrap_or(0),
                    group: group.unwrap_or(global.group),
                };
                let global_scale = match e.get("global_scale") {
                    None => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        findings.push(
                            Finding::error(
                                c::MLXLM_CONFIG,
                                format!(
                                    "config.json {at}.global_scale is {other}, expected true or false"
                                ),
                            )
                            .field(format!("{at}.global_scale")),
                        );
                        false
                    }
                };
                entries.insert(
                    key.clone(),
                    Entry::Quantized {
                        params,
                        global_scale,
                    },
                );
            }
            _ => {}
        }
    }
    Some(Block { global, entries })
}

fn dtype(t: &TensorInfo) -> &str {
    t.source_dtype.as_deref().unwrap_or("?")
}

fn shape(t: &TensorInfo) -> Vec<u64> {
    t.shape.clone().unwrap_or_default()
}

/// Finds the quantized modules, checks them and gives their tensors
/// layouts. Returns, per tensor, whether it belongs to a module (so it is
/// not taken for a dense tensor).
pub fn quantized(
    tensors: &mut [TensorInfo],
    block: Option<&Block>,
    findings: &mut Vec<Finding>,
) -> Vec<bool> {
    // The names are lent to a borrowed index while the records change,
    // and given back at the end.
    let names: Vec<String> = tensors
        .iter_mut()
        .map(|t| std::mem::take(&mut t.name))
        .collect();
    let members = resolve(tensors, &names, block, findings);
    for (t, name) in tensors.iter_mut().zip(names) {
        t.name = name;
    }
    members
}

/// Looks `{p}.{part}` up without allocating a name per lookup.
struct Index<'a> {
    map: foldhash::HashMap<&'a str, usize>,
    key: std::cell::RefCell<String>,
    /// Widths the checkpoint shows apart from the quantized modules'
    /// inputs: every dimension of a dense tensor, every module's output
    /// rows, each with a tensor that has it. A module's input is one of
    /// them in a model (the hidden size, an MLP's inner size, heads × head
    /// dim), which tells bits 4 / group 64 from bits 8 / group 32 on the
    /// same shapes.
    widths: BTreeMap<u64, usize>,
}

impl Index<'_> {
    fn get(&self, p: &str, part: &str) -> Option<usize> {
        let mut key = self.key.borrow_mut();
        key.clear();
        key.push_str(p);
        key.push('.');
        key.push_str(part);
        self.map.get(key.as_str()).copied()
    }
}

fn resolve(
    tensors: &mut [TensorInfo],
    names: &[String],
    block: Option<&Block>,
    findings: &mut Vec<Finding>,
) -> Vec<bool> {
    let mut index = Index {
        map: names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect(),
        key: std::cell::RefCell::new(String::new()),
        widths: BTreeMap::new(),
    };
    let mut members = vec![false; tensors.len()];
    let mut prefixes: Vec<&str> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".scales"))
        .collect();
    prefixes.sort_unstable();
    for (i, name) in names.iter().enumerate() {
        members[i] = ["weight", "scales", "biases", "global_scale"]
            .iter()
            .any(|part| {
                name.strip_suffix(part)
                    .and_then(|r| r.strip_suffix('.'))
                    .is_some_and(|p| index.get(p, "scales").is_some())
            });
    }
    // Parts without their scales.
    let mut orphans: Vec<(usize, String)> = Vec::new();
    for (i, (t, name)) in tensors.iter().zip(names).enumerate() {
        if let Some(p) = name.strip_suffix(".biases")
            && index.get(p, "scales").is_none()
        {
            orphans.push((
                i,
                format!("{name} has no {p}.scales: biases belong to an affine-quantized module"),
            ));
        }
        if let Some(p) = name.strip_suffix(".weight")
            && dtype(t) == "U32"
            && index.get(p, "scales").is_none()
        {
            orphans.push((
                i,
                format!("{name} is packed U32 codes but {p}.scales is missing"),
            ));
        }
    }
    for (i, msg) in orphans {
        members[i] = true;
        findings.push(Finding::error(c::MLXLM_MODULE, msg).tensor(names[i].clone()));
    }
    for (i, t) in tensors.iter().enumerate() {
        let dims = t.shape.as_deref().unwrap_or_default();
        if !members[i] {
            for &d in dims {
                index.widths.entry(d).or_insert(i);
            }
        } else if names[i].ends_with(".weight") && dims.len() >= 2 {
            index.widths.entry(dims[dims.len() - 2]).or_insert(i);
        }
    }
    let Some(block) = block else {
        return members;
    };
    let global_from: Arc<str> = Arc::from("the global quantization block");
    for p in &prefixes {
        module(tensors, names, &index, (block, &global_from), p, findings);
    }
    // Entries must name modules that exist, quantized as they say.
    for (key, entry) in &block.entries {
        let has = |part: &str| index.get(key, part).is_some();
        let field = format!("quantization[{key:?}]");
        if !has("weight") && !has("scales") {
            findings.push(
                Finding::error(
                    c::MLXLM_OVERRIDE,
                    format!(
                        "config.json's quantization has an entry for {key}, but the checkpoint has no module {key} (no {key}.weight)"
                    ),
                )
                .field(field),
            );
            continue;
        }
        match entry {
            Entry::Dense if has("scales") => findings.push(
                Finding::error(
                    c::MLXLM_OVERRIDE,
                    format!("config.json says {key} stays dense (false), but {key}.scales exists"),
                )
                .tensor(format!("{key}.scales"))
                .field(field),
            ),
            Entry::Quantized { .. } if !has("scales") => findings.push(
                Finding::error(
                    c::MLXLM_OVERRIDE,
                    format!(
                        "config.json gives {key} quantization parameters, but {key} has no scales (it is stored dense)"
                    ),
                )
                .tensor(format!("{key}.weight"))
                .field(field),
            ),
            _ => {}
        }
    }
    members
}

fn module(
    tensors: &mut [TensorInfo],
    names: &[String],
    index: &Index<'_>,
    (block, global_from): (&Block, &Arc<str>),
    p: &str,
    findings: &mut Vec<Finding>,
) {
    let get = |part: &str| index.get(p, part);
    let (Some(s), w, b, g) = (
        get("scales"),
        get("weight"),
        get("biases"),
        get("global_scale"),
    ) else {
        return;
    };
    let err = |name: &str, msg: String| Finding::error(c::MLXLM_MODULE, msg).tensor(name);
    let (params, global_scale, from) = match block.entries.get(p) {
        Some(Entry::Quantized {
            params,
            global_scale,
        }) => (
            *params,
            *global_scale,
            Arc::from(format!("its entry quantization[{p:?}]")),
        ),
        _ => (block.global, false, global_from.clone()),
    };
    let Some(w) = w else {
        findings.push(err(
            &names[s],
            format!("{p}.scales exists but {p}.weight is missing"),
        ));
        return;
    };
    let mut ok = true;
    if dtype(&tensors[w]) != "U32" {
        findings.push(err(
            &names[w],
            format!(
                "{p}.weight is {}, expected U32 packed codes",
                dtype(&tensors[w])
            ),
        ));
        ok = false;
    }
    let (ws, ss) = (shape(&tensors[w]), shape(&tensors[s]));
    let scale_kind = params.mode.scale_kind();
    let sd = dtype(&tensors[s]).to_string();
    match scale_kind {
        None => {
            if DenseDtype::parse(&sd).is_none() {
                findings.push(err(
                    &names[s],
                    format!("{p}.scales is {sd}; affine scales are F16, BF16 or F32"),
                ));
                ok = false;
            }
            match b {
                None => {
                    findings.push(err(
                        &names[s],
                        format!("{p} is affine ({from}) but {p}.biases is missing"),
                    ));
                    ok = false;
                }
                Some(b) if dtype(&tensors[b]) != sd || shape(&tensors[b]) != ss => {
                    findings.push(err(
                        &names[b],
                        format!(
                            "{p}.biases is {} {:?}, but {p}.scales is {sd} {ss:?}; they must match",
                            dtype(&tensors[b]),
                            shape(&tensors[b])
                        ),
                    ));
                    ok = false;
                }
                Some(_) => {}
            }
        }
        Some(_) => {
            if sd != "U8" {
                findings.push(err(
                    &names[s],
                    format!("{p}.scales is {sd}; {} scales are U8", params.mode.as_str()),
                ));
                ok = false;
            }
            if let Some(b) = b {
                findings.push(err(
                    &names[b],
                    format!(
                        "{p} is {} ({from}), which has no biases, but {p}.biases exists",
                        params.mode.as_str()
                    ),
                ));
                ok = false;
            }
        }
    }
    let rank = ws.len();
    if !(2..=4).contains(&rank) || ss.len() != rank || ws[..rank - 2] != ss[..rank - 2] {
        findings.push(err(
            &names[s],
            format!(
                "{p}.weight is {ws:?} and {p}.scales is {ss:?}: expected [..., out, words] and [..., out, groups] with the same leading dimensions"
            ),
        ));
        return;
    }
    let (out, words, groups) = (ws[rank - 2], ws[rank - 1], ss[rank - 1]);
    let experts = ws[..rank - 2]
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .unwrap_or(u64::MAX);
    if ss[rank - 2] != out || out == 0 || words == 0 || groups == 0 || experts == 0 {
        findings.push(err(
            &names[s],
            format!("{p}.weight is {ws:?} and {p}.scales is {ss:?}: the out dimensions differ or one is empty"),
        ));
        return;
    }
    if experts > MAX_EXPERTS {
        findings.push(err(
            &names[w],
            format!("{p}.weight stacks {experts} experts, more than {MAX_EXPERTS}"),
        ));
        return;
    }
    if let Some(why) = params.invalid() {
        findings.push(
            Finding::error(c::MLXLM_QUANT, format!("{p}: {why} ({from})")).tensor(names[w].clone()),
        );
        return;
    }
    let bits = u64::from(params.bits);
    let cols = groups.saturating_mul(params.group);
    if words.saturating_mul(32) != cols.saturating_mul(bits) {
        let inferred_group = if (words * 32).is_multiple_of(bits) {
            format!("{}", words * 32 / bits / groups.max(1))
        } else {
            "not an integer".into()
        };
        findings.push(
            Finding::error(
                c::MLXLM_QUANT,
                format!(
                    "{p}: {from} says bits {}, group_size {}, but the shapes disagree: weight [.., {out}, {words}] and scales [.., {out}, {groups}] give in = {groups}·{} = {cols} and bits = {words}·32/{cols} = {:.3}; with bits {} the shapes give group_size = {inferred_group}",
                    params.bits,
                    params.group,
                    params.group,
                    (words * 32) as f64 / cols.max(1) as f64,
                    params.bits
                ),
            )
            .tensor(names[w].clone()),
        );
        return;
    }
    if params.mode == QuantMode::Affine
        && !index.widths.is_empty()
        && !index.widths.contains_key(&cols)
    {
        // The shapes fix bits × group_size only: another pair that makes
        // the input a width the checkpoint has is what the codes are.
        let fits: Vec<(u64, u64, usize)> = [2u64, 3, 4, 5, 6, 8]
            .iter()
            .flat_map(|&b| [32u64, 64, 128].map(|g| (b, g)))
            .filter(|&(b, g)| {
                (b, g) != (bits, params.group)
                    && words.saturating_mul(32) == groups.saturating_mul(g * b)
            })
            .filter_map(|(b, g)| {
                let width = groups.saturating_mul(g);
                index.widths.get(&width).map(|&t| (b, g, t))
            })
            .collect();
        // A warning: the widths are a model's usual wiring, not a rule.
        if !fits.is_empty() {
            let others = fits
                .iter()
                .map(|&(b, g, t)| {
                    format!(
                        "bits {b}, group_size {g} (input {}, as {} has)",
                        groups.saturating_mul(g),
                        names[t]
                    )
                })
                .collect::<Vec<_>>()
                .join(" or ");
            findings.push(
                Finding::warning(
                    c::MLXLM_QUANT,
                    format!(
                        "{p}: {from} says bits {}, group_size {}, which makes its input {cols} wide, a width no other tensor of the checkpoint has; {others} fit the same shapes: the config probably does not describe these codes, and they are decoded as it says",
                        params.bits, params.group,
                    ),
                )
                .tensor(names[w].clone()),
            );
        }
    }
    // nvfp4's per-expert global scale.
    match (g, params.mode) {
        (Some(g), QuantMode::Nvfp4) if !global_scale => {
            findings.push(err(
                &names[g],
                format!(
                    "{p}.global_scale exists, but {from} does not say global_scale: true: mlx-lm builds {p} without a global scale and refuses the extra tensor"
                ),
            ));
            ok = false;
        }
        (Some(g), QuantMode::Nvfp4) => {
            let gs = shape(&tensors[g]);
            let lead = &ws[..rank - 2];
            let fits = gs == lead || (experts == 1 && (gs.is_empty() || gs == [1]));
            if dtype(&tensors[g]) != "F32" || !fits {
                findings.push(err(
                    &names[g],
                    format!(
                        "{p}.global_scale is {} {gs:?}, expected F32 {lead:?} (one per expert)",
                        dtype(&tensors[g])
                    ),
                ));
                ok = false;
            } else if ok {
                tensors[g].layout = Some(Layout::GlobalScale { experts });
            }
        }
        (Some(g), mode) => {
            findings.push(err(
                &names[g],
                format!(
                    "{p}.global_scale exists but {p} is {}; only nvfp4 has a global scale",
                    mode.as_str()
                ),
            ));
            ok = false;
        }
        (None, _) if global_scale => {
            findings.push(err(
                &names[w],
                format!("{from} says global_scale: true, but {p}.global_scale is missing"),
            ));
            ok = false;
        }
        (None, _) => {}
    }
    let note = Arc::new(QuantNote {
        mode: params.mode,
        bits: params.bits,
        group_size: params.group,
        from,
    });
    for i in [Some(w), Some(s), b, g].into_iter().flatten() {
        tensors[i].quant = Some(note.clone());
    }
    tensors[w].precision = Precision::Mlx(params.mode, params.bits);
    let mut logical = ws[..rank - 1].to_vec();
    logical.push(cols);
    tensors[w].shape = Some(logical);
    tensors[s].precision = match scale_kind {
        Some(ScaleKind::E8m0) => Precision::E8m0,
        Some(ScaleKind::E4m3) => Precision::E4m3,
        None => Precision::Original,
    };
    if !ok {
        return;
    }
    tensors[w].layout = Some(Layout::MlxCodes {
        mode: params.mode,
        bits: params.bits,
        group: params.group,
        experts,
        rows: out,
        cols,
    });
    let count = experts * out * groups;
    match scale_kind {
        Some(kind) => {
            tensors[s].layout = Some(Layout::MlxScales {
                kind,
                experts,
                per_expert: out * groups,
            });
        }
        None => {
            let dtype = DenseDtype::parse(&sd).unwrap_or(DenseDtype::F32);
            for i in [Some(s), b].into_iter().flatten() {
                tensors[i].layout = Some(Layout::MlxParams { dtype, count });
            }
        }
    }
}

/// Where the quantization block is missing: what there is instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBlock {
    /// A lone `.safetensors` file, opened without its folder.
    LoneFile,
    /// A folder with no config.json.
    NoConfig,
    /// A config.json with no MLX quantization block.
    Config,
}

/// Tensors stored as MLX quantized modules (a U32 `weight` with `scales`
/// beside it) where there is no quantization block to decode them: one
/// finding for the checkpoint, naming the first; an error where the
/// config is there and says nothing (mlx-lm builds the layers dense and
/// refuses the packed shapes), a warning for a lone file or a folder
/// without config.json (the block may be in a config not at hand).
pub fn unannounced(tensors: &[TensorInfo], missing: NoBlock, findings: &mut Vec<Finding>) {
    let u32_weights: std::collections::HashSet<&str> = tensors
        .iter()
        .filter(|t| dtype(t) == "U32")
        .filter_map(|t| t.name.strip_suffix(".weight"))
        .collect();
    let mut found: Vec<&str> = tensors
        .iter()
        .filter_map(|t| t.name.strip_suffix(".scales"))
        .filter(|p| u32_weights.contains(p))
        .collect();
    found.sort_unstable();
    let Some(first) = found.first() else {
        return;
    };
    let n = found.len();
    let modules = if n == 1 {
        format!("{first} is stored as an MLX quantized module")
    } else {
        format!("{n} modules ({first} first) are stored as MLX quantized modules")
    };
    let (finding, why): (fn(c::CheckId, String) -> Finding, &str) = match missing {
        NoBlock::Config => (
            |id, m| Finding::error(id, m),
            "config.json has no MLX quantization block (quantization, or quantization_config without quant_method): mlx-lm builds these layers dense and refuses the packed shapes",
        ),
        NoBlock::NoConfig => (
            |id, m| Finding::warning(id, m),
            "the folder has no config.json to say their bits, group size and mode",
        ),
        NoBlock::LoneFile => (
            |id, m| Finding::warning(id, m),
            "a lone file carries no config.json to say their bits, group size and mode (open its folder)",
        ),
    };
    findings.push(
        finding(
            c::MLXLM_CONFIG,
            format!("{modules} (U32 weight with scales beside it), but {why}; their codes are listed as stored, not decoded"),
        )
        .tensor(format!("{first}.weight"))
        .field("config.json"),
    );
}

/// Gives every tensor outside the quantized modules whose dtype
/// bundlescope decodes a dense layout (its values are checked finite and
/// histogrammed): F64, F32, F16, BF16, F8_E4M3, F8_E5M2, the integers
/// (I8 … U64) and BOOL. F8_E8M0, F4 and F6_* are listed and size-checked
/// without value checks. A U32 `weight` with `scales` beside it is an MLX
/// quantized module's packed codes even where no quantization block says
/// how to decode them ([`unannounced`]): listed as stored, never read as
/// integers.
pub fn dense(tensors: &mut [TensorInfo], members: &[bool]) {
    let scaled: std::collections::HashSet<String> = tensors
        .iter()
        .filter_map(|t| t.name.strip_suffix(".scales"))
        .map(str::to_string)
        .collect();
    for (i, t) in tensors.iter_mut().enumerate() {
        if t.layout.is_some() || members.get(i).copied().unwrap_or(false) {
            continue;
        }
        if dtype(t) == "U32"
            && t.name
                .strip_suffix(".weight")
                .is_some_and(|p| scaled.contains(p))
        {
            continue;
        }
        if let Some(dtype) = t
            .source_dtype
            .as_deref()
            .and_then(DenseDtype::parse_safetensors)
        {
            t.layout = Some(Layout::Dense {
                dtype,
                count: t.parameters().unwrap_or(0),
            });
        }
    }
}
