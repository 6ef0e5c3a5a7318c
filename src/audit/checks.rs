//! Every check bundlescope makes, with its stable id. Ids are public
//! interface: reports, CI gates and tests refer to them.

/// A check's id and what it verifies, for documentation and the GUI.
pub struct CheckInfo {
    /// Stable id, as it appears in findings.
    pub id: &'static str,
    /// One line on what the check requires.
    pub rule: &'static str,
}

macro_rules! checks {
    ($( $konst:ident = $id:literal : $rule:literal ;)*) => {
        $(
            #[doc = $rule]
            pub const $konst: &str = $id;
        )*
        /// All checks, in the order they are documented.
        pub const ALL: &[CheckInfo] = &[ $( CheckInfo { id: $id, rule: $rule } ),* ];
    };
}

checks! {
    MANIFEST_FIELD = "manifest.field": "every required manifest key is present with the right JSON type";
    MANIFEST_GROUP_SIZE = "manifest.group_size": "the bundle's group_size is 64";
    MANIFEST_TIED = "manifest.tie_word_embeddings": "tie_word_embeddings is true";
    MANIFEST_WEIGHTS_FILE = "manifest.weights_file": "weights_file is a bare file name (no '/', no '..', not absolute)";
    MANIFEST_TENSOR_COUNT = "manifest.tensor_count": "the manifest lists between 1 and 2000 tensor records";
    PAYLOAD_FILE = "payload.file": "the payload file exists, is a regular file and can be read";
    PAYLOAD_LENGTH = "payload.length": "the payload's length equals weights_bytes";
    PAYLOAD_SHA256 = "payload.sha256": "the payload's SHA-256 equals weights_sha256";
    PAYLOAD_UNREFERENCED = "payload.unreferenced": "the last record ends exactly at weights_bytes (no unreferenced bytes)";
    BUNDLE_CHANGED = "bundle.changed": "neither manifest nor payload changed (size, mtime, inode, manifest hash) while the audit ran";
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<_> = ALL.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len());
    }
}
