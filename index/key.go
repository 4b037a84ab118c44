package index

// The lookup key rules (contract §5 key resolution, contract §9 bad input), with
// the one wording a caller sees for each. Lookup applies them; the API
// applies CheckScheme and CheckCounts to the request as it arrives,
// before it resolves a key (a prompt may cost a tokenization), and
// answers with these same details.
const (
	// DetailNoScheme: the hash scheme is the key's domain; a lookup
	// without one matches nothing.
	DetailNoScheme = "hash_scheme is empty"
	// DetailCountsMismatch: block token counts, when given, are one per
	// block hash.
	DetailCountsMismatch = "block_token_counts length differs from block_hashes"
	// DetailNoKey: the request gives no key at all (no chain, no prefix
	// hash, no token ids, no prompt).
	DetailNoKey = "no key: give block_hashes, prefix_hash, token_ids or prompt_text"
	// DetailTooFewTokens: the token ids (or the prompt's) fill no block of
	// the model's block size, so they give no key.
	DetailTooFewTokens = "no key: no block hashes, no prefix hash and fewer tokens than one block"
)

// CheckScheme returns DetailNoScheme for an empty hash scheme, "" for any
// other.
func CheckScheme(scheme string) string {
	if scheme == "" {
		return DetailNoScheme
	}
	return ""
}

// CheckCounts returns DetailCountsMismatch when counts is given (not
// empty) and its length differs from hashes', "" otherwise.
func CheckCounts(hashes []uint64, counts []uint32) string {
	if len(counts) != 0 && len(counts) != len(hashes) {
		return DetailCountsMismatch
	}
	return ""
}
