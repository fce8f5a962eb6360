//go:build !goolm

package matrix

import (
	"context"
	"errors"

	"maunium.net/go/mautrix"
)

// startE2EE: this build has no end-to-end encryption (build with -tags
// goolm for it); New refuses matrix.encryption before it is called.
func startE2EE(context.Context, *Adapter, *mautrix.Client, State, KeyDB) (e2ee, error) {
	return nil, errors.New("end-to-end encryption is not in this build of opsbot (build it with -tags goolm)")
}

// PrepareStore: this build keeps no encryption keys (build with -tags goolm
// for them), so there is nothing to prepare; `opsbot store copy` then
// reports the source's key tables as not copied.
func PrepareStore(context.Context, KeyDB) error { return nil }
