//! Every check bundlescope makes, with its stable id. Ids are public
//! interface: reports, CI gates and tests refer to them.
//!
//! A [`CheckId`] can only be made here, by the `checks!` registry, so a
//! misspelt id does not compile and every id a finding carries is documented.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A registered check's stable id (`packed.scales`, …). Made only by the
/// registry below; compare, print or serialise it as its string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckId(&'static str);

impl CheckId {
    /// The id as it appears in reports.
    pub const fn as_str(self) -> &'static str {
        self.0
    }

    /// The registered check with this id (audit or spot check), if any.
    pub fn lookup(id: &str) -> Option<CheckId> {
        ALL.iter()
            .chain(SPOT_CHECKS)
            .find(|c| c.id.0 == id)
            .map(|c| c.id)
    }

    /// The rule this check verifies.
    pub fn rule(self) -> &'static str {
        ALL.iter()
            .chain(SPOT_CHECKS)
            .find(|c| c.id == self)
            .map_or("", |c| c.rule)
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<str> for CheckId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CheckId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl Serialize for CheckId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for CheckId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let id = String::deserialize(d)?;
        CheckId::lookup(&id)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown check id {id:?}")))
    }
}

/// A check's id and what it verifies, for documentation and the GUI.
pub struct CheckInfo {
    /// Stable id, as it appears in findings.
    pub id: CheckId,
    /// One line on what the check requires.
    pub rule: &'static str,
}

macro_rules! checks {
    ($list:ident: $( $konst:ident = $id:literal : $rule:literal ;)*) => {
        $(
            #[doc = $rule]
            pub const $konst: CheckId = CheckId($id);
        )*
        /// Every check of this list, in the order they are documented.
        pub const $list: &[CheckInfo] = &[ $( CheckInfo { id: $konst, rule: $rule } ),* ];
    };
}

checks! {
    ALL:
    BUNDLE_OPEN = "bundle.open": "the path exists, can be read and is a bundle folder (or its manifest.json) whose manifest names a known format";
    BUNDLE_UNSUPPORTED = "bundle.unsupported": "the bundle's format is one bundlescope can audit (GPTQ-Q4 variants other than audio8-gptq-q4-calibrated-v1, and A8MOD001, are recognised but not yet supported)";
    MANIFEST_PARSE = "manifest.parse": "manifest.json is a non-empty, valid JSON object";
    MANIFEST_FIELD = "manifest.field": "every required manifest key is present with the right JSON type";
    MANIFEST_GROUP_SIZE = "manifest.group_size": "the bundle's group_size is 64";
    MANIFEST_TIED = "manifest.tie_word_embeddings": "tie_word_embeddings is true";
    MANIFEST_WEIGHTS_FILE = "manifest.weights_file": "weights_file is a bare file name (no '/', no '..', not absolute)";
    MANIFEST_TENSOR_COUNT = "manifest.tensor_count": "the manifest lists between 1 and 2000 tensor records";
    PAYLOAD_FILE = "payload.file": "every payload file (the weights file, each shard) exists, is a regular file and can be read";
    PAYLOAD_LENGTH = "payload.length": "each payload file's length equals the manifest's (weights_bytes; a shard's bytes when given)";
    PAYLOAD_SHA256 = "payload.sha256": "each payload file's SHA-256 equals the manifest's (weights_sha256; a shard's sha256 when given)";
    PAYLOAD_UNREFERENCED = "payload.unreferenced": "the last record ends exactly at weights_bytes (no unreferenced bytes)";
    BUNDLE_CHANGED = "bundle.changed": "neither manifest nor payload changed (size, mtime, inode, manifest hash) while the audit ran";
    TENSOR_DUPLICATE = "tensor.duplicate": "no tensor is byte-identical to another tensor of the bundle, a copied layer being a classic packaging mistake (warning; names its twin)";
    NAMES_CONFUSABLE = "names.confusable": "no two tensor names display alike: none differs from another only by invisible characters (zero-width, bidirectional controls) or by letters that look like others (Cyrillic а for a)";
    RECORD_FIELD = "record.field": "every tensor record has its fields with the right JSON types";
    RECORD_NAME = "record.name_unique": "tensor names are unique";
    RECORD_BYTES = "record.bytes": "a record's bytes is an integer greater than 0";
    RECORD_CONTIGUOUS = "record.contiguous": "records are contiguous: the first at offset 0, each next at the previous offset + bytes";
    RECORD_WITHIN = "record.within_payload": "every record ends within weights_bytes";
    RECORD_FULL8_V2 = "record.full8_requires_v2": "q3_full8 records appear only in audio8-mixed-bundle-v2";
    RECORD_PRECISION = "record.precision": "precision is one of original, q3, q3_full8, q4";
    DENSE_FORMAT = "dense.format": "a dense record has encoding original and source_dtype BF16, F16 or F32";
    DENSE_SHAPE = "dense.shape": "a dense shape is a non-empty list of positive integers";
    DENSE_BYTES = "dense.bytes": "a dense record's bytes equal prod(shape) * itemsize and are at most 64 MiB";
    DENSE_FINITE = "dense.finite": "every dense value is finite";
    PACKED_GRID = "packed.grid": "encoding and grid match the precision (uniform_lsb without grid; uniform_lsb_full8 with the exact full8 grid)";
    PACKED_DIMENSIONS = "packed.dimensions": "a packed shape is [rows, cols] with 0 < rows <= 262144, 0 < cols <= 32768, cols % 64 == 0";
    PACKED_STORAGE = "packed.storage": "group_size, padded_cols, row_bytes, codes_bytes, scales_offset, scales_bytes, scales_dtype, scales_shape and bytes equal what the shape implies";
    PACKED_SCALES = "packed.scales": "every F16 scale is finite and greater than 0";
    PACKED_RESERVED_CODE = "packed.reserved_code": "no stored code exceeds the precision's maximum (6 for q3, 14 for q4)";
    ALIAS_TARGET = "alias.target": "every alias is not itself a tensor and points at a tensor that exists";
    ALIAS_TIED_HEAD = "alias.tied_head": "language_model.lm_head.weight resolves to language_model.model.embed_tokens.weight, which exists";
    NVFP4_LAYOUT = "nvfp4.layout": "quantization is mode nvfp4, bits 4, group_size 16, layout stacked-global-scale (the old absolute-scale artifact is ~5% off and must be regenerated)";
    NVFP4_MANIFEST = "nvfp4.manifest": "shards is a non-empty list of {file} objects and weight_map an object of tensor name to shard file";
    SHARD_NAME = "shard.name": "every shard file name is a bare name inside the folder (no '/', no '..', not absolute) and listed once";
    SHARD_HEADER = "shard.header": "a shard's header length is at most 100 MB and less than the file, it lists at most 32,768 entries (and all shards together at most 100,000 tensors), and its JSON lists tensors with known dtypes, shapes and data_offsets";
    SHARD_OFFSETS = "shard.offsets": "a shard's data_offsets are in bounds, contiguous, non-overlapping and cover the data with no gap, each span equal to prod(shape) * itemsize";
    WEIGHT_MAP = "nvfp4.weight_map": "every weight_map entry names a listed shard that holds that tensor, and every tensor in the shards is in weight_map";
    EXPERT_SET = "nvfp4.experts": "each MoE layer has gate_up_proj and down_proj weight (U32 [E,out,in/8]), scales (U8 [E,out,in/16]) and global_scale (F32 [E]) with one E per layer";
    GLOBAL_SCALE = "nvfp4.global_scale": "every expert's global_scale is finite and greater than 0";
    E4M3_SCALES = "nvfp4.scales": "no E4M3 scale byte is NaN (0x7F or 0xFF)";
    NVFP4_DTYPE = "nvfp4.dtype": "every tensor outside the experts is BF16";
    PROVENANCE_FIELD = "provenance.field": "a calibrated GPTQ-Q4 overlay has a provenance block: parent {manifest_sha256, weights_sha256, source_revision}, calibration (an object), overlay (names), copied ([{name, range_sha256}]) and overlay_identity_sha256, hashes as 64 lower-case hex digits";
    PROVENANCE_PARTITION = "provenance.partition": "every tensor record is in exactly one of provenance.overlay and provenance.copied, and every name listed there is a tensor record";
    PROVENANCE_OVERLAY_Q4 = "provenance.overlay_q4": "every overlay (recalibrated) tensor is q4";
    PROVENANCE_COPIED_HASH = "provenance.copied_hash": "every copied tensor's range_sha256 equals the SHA-256 of its byte range in the payload";
    PROVENANCE_IDENTITY = "provenance.overlay_identity": "overlay_identity_sha256 equals the SHA-256 of the canonical JSON of {parent: parent.manifest_sha256, overlay: [{name, range_sha256}] sorted by name}";
    PROVENANCE_PARENT = "provenance.parent": "the parent bundle (--parent DIR, picked in the app, or a sibling folder) has the declared manifest SHA-256, weights SHA-256 and source revision (info when no parent is at hand)";
    PROVENANCE_PARENT_COPIED = "provenance.parent_copied": "every copied tensor is byte-identical to the parent's tensor of that name";
    PROVENANCE_PARENT_OVERLAY = "provenance.parent_overlay": "every overlay tensor has the parent's name and shape and differs from the parent's bytes";
    PROVENANCE_PARENT_SCALES = "provenance.parent_scales": "(info) whether each overlay tensor's F16 scales equal the parent's: static parent scale equality";
    GGUF_MAGIC = "gguf.magic": "a GGUF file starts with the magic GGUF";
    GGUF_VERSION = "gguf.version": "the GGUF version is 2 or 3";
    GGUF_HEADER = "gguf.header": "the header's fixed-size fields (counts, types, dims, offsets) all lie inside the file";
    GGUF_COUNTS = "gguf.counts": "the tensor, key/value and array item counts fit in the bytes that follow them and within bundlescope's limits (32,768 tensors, 65,536 key/values, 1,048,576 array items; checked before any allocation)";
    GGUF_STRING = "gguf.string": "every string's length fits in the bytes that follow it, and the string is UTF-8";
    GGUF_KV_TYPE = "gguf.kv_type": "every metadata value type and array item type is a known GGUF type (0..=12), arrays nested at most 3 deep";
    GGUF_KV_KEY = "gguf.kv_key": "every metadata key appears once";
    GGUF_ALIGNMENT = "gguf.alignment": "general.alignment, when present, is a UINT32 power of two (default 32)";
    GGUF_TENSOR_TYPE = "gguf.tensor_type": "every tensor's ggml type is one ggml knows today";
    GGUF_DIMS = "gguf.dims": "every tensor has 1 to 4 dimensions, each > 0, ne[0] a multiple of its type's block size, element count and byte size within 64 bits";
    GGUF_OFFSET_ALIGNED = "gguf.offset_aligned": "every tensor's offset is a multiple of the alignment";
    GGUF_OFFSET_RANGE = "gguf.offset_range": "every tensor's bytes lie inside the file's data section";
    GGUF_OVERLAP = "gguf.overlap": "no two tensors' bytes overlap";
    GGUF_NAME = "gguf.name_unique": "tensor names are unique (across split parts too)";
    GGUF_UNCOVERED = "gguf.uncovered": "every byte of the data section belongs to a tensor or to the alignment padding after one (warning)";
    GGUF_SCALE = "gguf.scale": "every block's F16 scale d (and m or dmin where the type has one; F32 d for Q8_K) is finite, and no MXFP4 E8M0 scale is 0xFF (NaN)";
    GGUF_FINITE = "gguf.finite": "every F32, F16 and BF16 value is finite";
    MLXLM_CONFIG = "mlxlm.config": "config.json is a JSON object whose quantization block has integer group_size and bits, a known mode, and per-module entries that are objects or booleans; a folder whose tensors are MLX quantized modules has such a block";
    MLXLM_INDEX = "mlxlm.index": "model.safetensors.index.json is a JSON object whose weight_map maps tensor names to bare shard file names";
    MLXLM_SHARDS = "mlxlm.shards": "every shard the index names exists, and every .safetensors file in the folder is named by the index";
    MLXLM_WEIGHT_MAP = "mlxlm.weight_map": "every weight_map entry exists in the shard it names, and every shard tensor is in weight_map, in one shard only";
    MLXLM_MODULE = "mlxlm.module": "each quantized module has weight (U32), scales and, for affine only, biases (same dtype and shape as the scales, F16/BF16/F32; U8 scales for the float modes), with matching leading dimensions";
    MLXLM_OVERRIDE = "mlxlm.override": "every per-module entry of the quantization block names a module that exists, quantized when the entry is an object, dense when it is false";
    MLXLM_QUANT = "mlxlm.quant_config": "each module's bits, group_size and mode (its entry, else the global block) are valid for the mode and agree with the shapes (group_size = in / scales[-1], bits = weight[-1] * 32 / in)";
    MLXLM_SCALES = "mlxlm.scales": "affine scales and biases are finite; E8M0 scales are not NaN (0xFF); E4M3 scales are not NaN and not negative";
    MLXLM_CODES = "mlxlm.codes": "no mxfp8 weight byte is an E4M3 NaN (0x7F or 0xFF)";
    CHECKSUMS_FILE = "checksums.file": "a SHA256SUMS or *.sha256 file in the folder, and every audit --expect, gives 64 hex digits for a payload file that exists";
    OMS_BUNDLE = "oms.bundle": "a signature file (model.sig or --signature) is a Sigstore bundle v0.1 to v0.3 with its required fields, within the size limits";
    OMS_ENVELOPE = "oms.envelope": "the bundle's DSSE envelope carries an in-toto payload and a signature, both valid base64";
    OMS_SIGNATURE = "oms.signature": "the DSSE signature over the payload bytes as received (PAE) verifies with the signer's key";
    OMS_KEY = "oms.key": "key method: a --key is given, readable, on P-256/P-384/P-521, and is the key the bundle names (hint or raw bytes)";
    OMS_CERTIFICATE = "oms.certificate": "certificate method: the chain in the bundle leads to a --cert-root, every certificate valid at signing time, issuers are CAs, the leaf may sign";
    OMS_SIGSTORE = "oms.sigstore": "sigstore method: the chain and the transparency-log entry are checked only against --trusted-root; without one, both are said to be unverified";
    OMS_STATEMENT = "oms.statement": "the signed payload is an in-toto Statement v1 with predicate model_signing signature v1.0 (or the pre-1.0 Digests v0.1) and its required fields";
    OMS_MANIFEST = "oms.manifest": "the serialization (files or shards, hash type) is known, resources are unique and well-formed, and their digests hash to the subject's digest";
    OMS_PATH = "oms.path": "every signed path stays inside the model folder; no symbolic link unless allowed, no special file";
    OMS_DIGEST = "oms.digest": "every signed file or shard has the digest the signature gives";
    OMS_MISSING = "oms.missing": "every signed file (and shard range) exists in the folder";
    OMS_UNSIGNED = "oms.unsigned": "every file in the folder (minus ignore_paths) is signed, unless --ignore-unsigned";
    OMS_TLOG = "oms.tlog": "sigstore method with --trusted-root: the log entry (Rekor v1 dsse 0.0.1, or Rekor v2 hashedrekord 0.0.2) records this bundle's payload, signature and certificate; its signed entry timestamp and its inclusion proof (up to a checkpoint) verify with a log key of the trusted root (ECDSA or Ed25519); the certificate was valid at the integration time";
    OMS_TIMESTAMP = "oms.timestamp": "sigstore method with --trusted-root: every RFC 3161 timestamp in the bundle is over its signature and verifies against a timestamp authority of the trusted root (signed attributes, signature, chain and timeStamping key usage, service period); the certificate was valid at each stamped time";
}

checks! {
    SPOT_CHECKS:
    SPOTCHECK_MLX = "spotcheck.mlx": "MLX's quantized_matmul of the packed bytes agrees with the decoder's f64 product within the dtype's tolerance";
    SPOTCHECK_EMBEDDING = "spotcheck.embedding": "the tied embedding's rows gathered through MLX's dequantize equal the decoder's bit for bit";
    SPOTCHECK_REFERENCE = "spotcheck.reference": "against the reference checkpoint, the output error and the worst group stay within the precision's bounds";
    SPOTCHECK_GGUF_LOADER = "spotcheck.gguf_loader": "each GGUF Q4_0/Q4_1/Q8_0 tensor's words, scales and biases as MLX's own GGUF loader (load_gguf) returns them equal bundlescope's reading bit for bit";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<_> = ALL.iter().chain(SPOT_CHECKS).map(|c| c.id).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len());
    }
}

#[cfg(test)]
mod serde_tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_json_and_unknown_ids_are_refused() {
        let json = serde_json::to_string(&PACKED_SCALES).unwrap();
        assert_eq!(json, "\"packed.scales\"");
        let back: CheckId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, PACKED_SCALES);
        assert!(serde_json::from_str::<CheckId>("\"packed.scalez\"").is_err());
        assert_eq!(CheckId::lookup("spotcheck.mlx"), Some(SPOTCHECK_MLX));
    }
}
