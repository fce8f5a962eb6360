package matrix

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// The account's recovery key (the key of its secret storage, SSSS, where
// the private cross-signing keys live, encrypted) is kept in the store
// sealed with the key that seals the device's other secrets there (the
// pickle key, "matrix/pickle/USER"): AES-256-GCM, under
// "matrix/recovery/USER". `opsbot matrix recovery-key` prints it.

func pickleStateKey(user string) string   { return "matrix/pickle/" + user }
func recoveryStateKey(user string) string { return "matrix/recovery/" + user }

// errNoRecoveryKey: the store keeps no recovery key for the account.
// sealRecoveryKey (xsign.go, in builds with encryption) keeps one.
var errNoRecoveryKey = errors.New("no recovery key kept")

// openRecoveryKey returns the recovery key kept in st, or an error wrapping
// errNoRecoveryKey when there is none.
func openRecoveryKey(ctx context.Context, st State, user string, pickle []byte) (string, error) {
	v, err := st.SyncToken(ctx, recoveryStateKey(user))
	if err != nil {
		return "", fmt.Errorf("read the recovery key from the store: %w", err)
	}
	if v == "" {
		return "", errNoRecoveryKey
	}
	sealed, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("the recovery key kept in the store is damaged: %w", err)
	}
	gcm, err := recoveryAEAD(pickle)
	if err != nil {
		return "", err
	}
	if len(sealed) < gcm.NonceSize() {
		return "", errors.New("the recovery key kept in the store is damaged: too short")
	}
	rk, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], []byte(recoveryStateKey(user)))
	if err != nil {
		return "", errors.New("the recovery key kept in the store does not open with the store's sealing key (the store's matrix keys were mixed up)")
	}
	return string(rk), nil
}

func recoveryAEAD(pickle []byte) (cipher.AEAD, error) {
	if len(pickle) != 32 {
		return nil, fmt.Errorf("the key sealing the device's keys has %d bytes, want 32", len(pickle))
	}
	block, err := aes.NewCipher(pickle)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// RecoveryKey returns the recovery key of user's account that opsbot made
// when it created the account's cross-signing keys (or was given in
// matrix.recovery_key), as kept in st: `opsbot matrix recovery-key`.
func RecoveryKey(ctx context.Context, st State, user string) (string, error) {
	v, err := st.SyncToken(ctx, pickleStateKey(user))
	if err != nil {
		return "", fmt.Errorf("read the key sealing %s's keys: %w", user, err)
	}
	if v == "" {
		return "", fmt.Errorf("this store keeps no encryption keys for %s: opsbot has not started with matrix.encryption on this store", user)
	}
	pickle, err := hex.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("the key sealing %s's keys is damaged: %w", user, err)
	}
	rk, err := openRecoveryKey(ctx, st, user, pickle)
	if errors.Is(err, errNoRecoveryKey) {
		return "", fmt.Errorf("this store keeps no recovery key for %s: opsbot did not create the account's cross-signing keys "+
			"(another client did: its recovery key is with whoever set it up, e.g. Element's Settings > Encryption), "+
			"and none was given in matrix.recovery_key", user)
	}
	return rk, err
}
