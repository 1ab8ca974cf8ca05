-- The text search configuration of each query index generation. A generation's documents and the
-- queries that read it use the same one; a rebuild may choose another (stratus reindex --language).
ALTER TABLE query_index.generations ADD COLUMN language regconfig NOT NULL DEFAULT 'simple';
