package onnx_test

import "testing"

// TestTfIdfVectorizerMatchesORT covers TF, IDF and TFIDF modes, weights,
// uni- to trigrams with and without skips, 1-D and batched, int32, int64
// and string input (words outside the pool included), against ONNX
// Runtime.
func TestTfIdfVectorizerMatchesORT(t *testing.T) {
	runORTCases(t, []string{
		"tfidf_tf_uni_to_tri_skip2", "tfidf_idf_weighted_bigrams", "tfidf_tfidf_weighted_all_skip0", "tfidf_1d_int32_trigrams_skip3",
		"tfidf_strings_uni_to_tri_skip1",
	})
}
