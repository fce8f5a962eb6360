//go:build goolm

package config

// MatrixEncryptionBuilt reports whether this binary can do Matrix end-to-end
// encryption (matrix.encryption): it was built with -tags goolm, mautrix's
// pure-Go Olm.
const MatrixEncryptionBuilt = true
