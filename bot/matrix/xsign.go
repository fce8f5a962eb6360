//go:build goolm

package matrix

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/signatures"
	"maunium.net/go/mautrix/crypto/ssss"
	"maunium.net/go/mautrix/id"
)

// crossSign makes the device one its account has signed (cross-signing),
// which clients that talk only to such devices (Element from April 2026,
// MSC4153 "exclude insecure devices") require. q is the homeserver's
// answer about the account's keys at this start:
//
//   - the device is signed by the account's self-signing key already: done,
//     with no further request;
//   - the account has no cross-signing keys: they are made here (the
//     homeserver asks for matrix.password, user-interactive auth), their
//     private halves kept in the account's secret storage (SSSS) under a new
//     recovery key, which is kept in the store (sealed) before anything is
//     published; then the device is signed;
//   - the account has keys (made by another client, or by opsbot on a store
//     that is lost): with a recovery key (matrix.recovery_key, else the one
//     kept in the store) they are fetched from secret storage and the device
//     is signed; without one, nothing is signed.
//
// Whatever stays unsigned is logged with what to do, and Ready reports it;
// encryption works on either way (for clients that share keys with
// unsigned devices).
func (d *olmDevice) crossSign(ctx context.Context, st State, q *mautrix.RespQueryKeys) {
	a, start := d.a, time.Now()
	why := d.signDevice(ctx, st, q)
	if why == "" {
		a.trust.Store(nil)
		return
	}
	a.trust.Store(&why)
	a.log.Error("end-to-end encryption: this device is not cross-signed, so clients that exclude insecure devices "+
		"(Element from April 2026) neither send it room keys nor read its messages", "device", d.cli.DeviceID,
		"why", why, "session_key", d.fingerprint(), "took", time.Since(start).Round(time.Millisecond))
}

// signDevice does crossSign's work; it returns why the device is not
// signed, or "".
func (d *olmDevice) signDevice(ctx context.Context, st State, q *mautrix.RespQueryKeys) string {
	a, user, dev := d.a, d.cli.UserID, d.cli.DeviceID
	master, hasMaster := q.MasterKeys[user]
	if hasMaster && signedBySelfSigning(q, user, dev, master.FirstKey()) {
		a.log.Info("end-to-end encryption: device cross-signed by its account; clients show it verified", "device", dev)
		return ""
	}
	rk, fromConfig := a.cfg.RecoveryKey.Value(), true
	if rk == "" {
		fromConfig = false
		kept, err := openRecoveryKey(ctx, st, string(user), d.pickle)
		if err != nil && !errors.Is(err, errNoRecoveryKey) {
			return err.Error()
		}
		rk = kept
	}
	if !hasMaster {
		return d.bootstrap(ctx, st)
	}
	if rk == "" {
		return fmt.Sprintf("the account %s already has cross-signing keys (made by another client, or by opsbot on a store that is gone), "+
			"and opsbot has no recovery key to sign this device with: set matrix.recovery_key to the account's recovery key "+
			"(from `opsbot matrix recovery-key` on the old store, or from whoever set up the account's encryption) and restart opsbot", user)
	}
	if why := d.restore(ctx, rk, master.FirstKey()); why != "" {
		return why
	}
	if fromConfig {
		if err := sealRecoveryKey(ctx, st, string(user), d.pickle, rk); err != nil {
			a.log.Warn("keep matrix.recovery_key in the store (it stays needed in the config)", "err", err)
		}
	}
	a.log.Info("end-to-end encryption: device signed with the account's cross-signing keys from secret storage; clients show it verified", "device", dev)
	return ""
}

// signedBySelfSigning reports whether q shows device dev of user signed by
// the account's self-signing key, itself signed by master.
func signedBySelfSigning(q *mautrix.RespQueryKeys, user id.UserID, dev id.DeviceID, master id.Ed25519) bool {
	ssk, ok := q.SelfSigningKeys[user]
	if !ok || master == "" {
		return false
	}
	if ok, _ := signatures.VerifySignatureJSON(ssk, user, master.String(), master); !ok {
		return false
	}
	keys, ok := q.DeviceKeys[user][dev]
	if !ok {
		return false
	}
	sk := ssk.FirstKey()
	signed, _ := signatures.VerifySignatureJSON(keys, user, sk.String(), sk)
	return signed
}

// bootstrap makes the account's cross-signing keys and signs the device;
// it returns why not, or "".
func (d *olmDevice) bootstrap(ctx context.Context, st State) string {
	a, mach, user := d.a, d.mach, d.cli.UserID
	if a.cfg.Password == "" {
		return fmt.Sprintf("the account %s has no cross-signing keys, and making them needs the account's password "+
			"(the homeserver asks for it): set matrix.password once and restart opsbot, or set them up in Element "+
			"(log in as %s, Settings > Encryption) and give opsbot the recovery key in matrix.recovery_key", user, user)
	}
	key, err := mach.SSSS.GenerateAndUploadKey(ctx, "")
	if err != nil {
		return "make the account's secret storage key: " + err.Error()
	}
	// Kept before anything is published: the keys are never on the
	// homeserver without a way to open them.
	if err := sealRecoveryKey(ctx, st, string(user), d.pickle, key.RecoveryKey()); err != nil {
		return err.Error()
	}
	keys, err := mach.GenerateCrossSigningKeys()
	if err != nil {
		return err.Error()
	}
	if err := mach.UploadCrossSigningKeysToSSSS(ctx, key, keys); err != nil {
		return "keep the cross-signing keys in the account's secret storage: " + err.Error()
	}
	uia := func(r *mautrix.RespUserInteractive) any {
		return &mautrix.ReqUIAuthLogin{BaseAuthData: mautrix.BaseAuthData{Type: mautrix.AuthTypePassword, Session: r.Session},
			User: user.String(), Password: a.cfg.Password.Value()}
	}
	if err := mach.PublishCrossSigningKeys(ctx, keys, uia); err != nil {
		return "upload the account's cross-signing keys (with matrix.password): " + err.Error()
	}
	if err := mach.SSSS.SetDefaultKeyID(ctx, key.ID); err != nil {
		return "mark the recovery key as the account's default: " + err.Error()
	}
	if why := d.signOwn(ctx); why != "" {
		return why
	}
	a.log.Warn("end-to-end encryption: created the account's cross-signing keys and signed this device; clients show it verified. "+
		"Their recovery key is kept in opsbot's store: print it with `opsbot matrix recovery-key --config FILE` and keep a copy "+
		"(a new store or a second machine needs it in matrix.recovery_key)", "user", user, "device", d.cli.DeviceID)
	return ""
}

// restore fetches the account's private cross-signing keys from its secret
// storage with recovery key rk and signs the device; master is the
// account's master key on the homeserver. It returns why not, or "".
func (d *olmDevice) restore(ctx context.Context, rk string, master id.Ed25519) string {
	mach := d.mach
	keyID, meta, err := mach.SSSS.GetDefaultKeyData(ctx)
	if err != nil {
		return "read the account's secret storage (to fetch its cross-signing keys): " + err.Error()
	}
	key, err := meta.VerifyRecoveryKey(keyID, rk)
	if err != nil && !errors.Is(err, ssss.ErrUnverifiableKey) {
		return fmt.Sprintf("matrix.recovery_key does not open the account's secret storage (key %s): %v; give the account's current recovery key", keyID, err)
	}
	if err := mach.FetchCrossSigningKeysFromSSSS(ctx, key); err != nil {
		return "fetch the account's cross-signing keys from its secret storage: " + err.Error()
	}
	if got := mach.CrossSigningKeys.MasterKey.PublicKey(); got != master {
		mach.CrossSigningKeys = nil
		return fmt.Sprintf("the account's secret storage holds master key %s, but the account's master key is %s (its cross-signing was reset): "+
			"give the recovery key of the current setup in matrix.recovery_key", got, master)
	}
	return d.signOwn(ctx)
}

// signOwn signs the device with the self-signing key and the master key
// with the device; it returns why not, or "".
func (d *olmDevice) signOwn(ctx context.Context) string {
	if err := d.mach.SignOwnDevice(ctx, d.mach.OwnIdentity()); err != nil {
		return "sign this device with the account's self-signing key: " + err.Error()
	}
	if err := d.mach.SignOwnMasterKey(ctx); err != nil {
		return "sign the account's master key with this device: " + err.Error()
	}
	return ""
}

// sealRecoveryKey keeps rk in st, sealed with pickle.
func sealRecoveryKey(ctx context.Context, st State, user string, pickle []byte, rk string) error {
	gcm, err := recoveryAEAD(pickle)
	if err != nil {
		return err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	sealed := gcm.Seal(nonce, nonce, []byte(rk), []byte(recoveryStateKey(user)))
	if err := st.SetSyncToken(ctx, recoveryStateKey(user), base64.StdEncoding.EncodeToString(sealed)); err != nil {
		return fmt.Errorf("keep the recovery key in the store: %w", err)
	}
	return nil
}
