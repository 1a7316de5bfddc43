-- Vectors are stored as int8 with one f32 scale each ('i8': a quarter of the f32 size;
-- cosine within about 1e-3 of the original). Rows written before keep 'f32' and are read
-- as they are.
ALTER TABLE embeddings ADD COLUMN encoding TEXT NOT NULL DEFAULT 'f32'
    CHECK (encoding IN ('f32', 'i8'));
ALTER TABLE embedding_cache ADD COLUMN encoding TEXT NOT NULL DEFAULT 'f32'
    CHECK (encoding IN ('f32', 'i8'));
