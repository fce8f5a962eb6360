package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"time"

	"github.com/pkg/sftp"
)

// sftpCache is a host's sftp client, opened lazily on the cached connection.
type sftpCache struct {
	mu sync.Mutex
	c  *conn
	sc *sftp.Client
}

// sftpClient returns an sftp client on the host's current connection, opening one (and dialling
// again once, when the subsystem cannot be opened on a broken connection) as needed.
func (h *Host) sftpClient(ctx context.Context) (*sftp.Client, error) {
	for attempt := 0; ; attempt++ {
		c, err := h.client(ctx)
		if err != nil {
			return nil, err
		}
		h.sftp.mu.Lock()
		if h.sftp.c == c && h.sftp.sc != nil {
			sc := h.sftp.sc
			h.sftp.mu.Unlock()
			return sc, nil
		}
		if h.sftp.sc != nil {
			h.sftp.sc.Close()
			h.sftp.sc, h.sftp.c = nil, nil
		}
		type result struct {
			sc  *sftp.Client
			err error
		}
		ch := make(chan result, 1)
		go func() {
			sc, err := sftp.NewClient(c.client)
			ch <- result{sc, err}
		}()
		var r result
		select {
		case r = <-ch:
		case <-ctx.Done():
			h.sftp.mu.Unlock()
			go func() {
				if r := <-ch; r.sc != nil {
					r.sc.Close()
				}
			}()
			return nil, ctx.Err()
		}
		if r.err == nil {
			h.sftp.sc, h.sftp.c = r.sc, c
			h.sftp.mu.Unlock()
			return r.sc, nil
		}
		h.sftp.mu.Unlock()
		if attempt > 0 || !connBroken(c) {
			return nil, fmt.Errorf("open sftp: %w", r.err)
		}
		h.forget(c)
	}
}

// dropSFTP closes sc if it is still the cached client.
func (h *Host) dropSFTP(sc *sftp.Client) {
	h.sftp.mu.Lock()
	if h.sftp.sc == sc {
		h.sftp.sc, h.sftp.c = nil, nil
	}
	h.sftp.mu.Unlock()
	sc.Close()
}

// withSFTP runs f with the host's sftp client; on ctx end it closes the client (which ends f)
// and returns ctx.Err().
func (h *Host) withSFTP(ctx context.Context, f func(*sftp.Client) error) error {
	sc, err := h.sftpClient(ctx)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f(sc) }()
	select {
	case err := <-done:
		if lostConnection(err) {
			h.dropSFTP(sc)
		}
		return err
	case <-ctx.Done():
		h.dropSFTP(sc)
		<-done
		return ctx.Err()
	}
}

// ReadFile reads a file with sftp over the host's connection. The host's Prefix is not applied:
// the path is on the machine the SSH server runs on.
func (h *Host) ReadFile(ctx context.Context, name string) ([]byte, error) {
	var data []byte
	err := h.withSFTP(ctx, func(sc *sftp.Client) error {
		f, err := sc.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		var b bytes.Buffer
		if _, err := f.WriteTo(&b); err != nil {
			return err
		}
		data = b.Bytes()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s on %s: %w", name, h.cfg.Name, err)
	}
	return data, nil
}

// Lstat describes name itself, with sftp over the host's connection (Prefix
// not applied): a symbolic link is described, not followed. A missing name
// is an error that wraps fs.ErrNotExist.
func (h *Host) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := h.withSFTP(ctx, func(sc *sftp.Client) (err error) {
		fi, err = sc.Lstat(name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lstat %s on %s: %w", name, h.cfg.Name, err)
	}
	return fi, nil
}

// WriteFileAtomic replaces a file with data, with sftp over the host's connection (Prefix not
// applied). It writes NAME.opsbot-tmp-RAND in the same directory with mode perm, syncs it where
// the server supports fsync, and renames it over name with posix-rename (plain rename where that
// is unsupported), so readers see the old or the new content, never a mix. On any error the
// temporary file is removed (on a new connection when the connection was lost or ctx ended)
// and name is left as it was, except when the connection was lost after the rename was sent:
// then the error wraps ErrOutcomeUnknown, and name holds the old or the new content (read it
// back to know which).
func (h *Host) WriteFileAtomic(ctx context.Context, name string, data []byte, perm os.FileMode) error {
	return h.writeFileAtomic(ctx, nil, name, data, perm)
}

// writeFileAtomic is WriteFileAtomic, checking hold (when set) before it
// sends anything.
func (h *Host) writeFileAtomic(ctx context.Context, hold Hold, name string, data []byte, perm os.FileMode) error {
	if name == "" || path.Base(name) == "/" || path.Base(name) == "." {
		return fmt.Errorf("write file on %s: bad path %q", h.cfg.Name, name)
	}
	if err := checkHold(hold, "write "+name+" on "+h.cfg.Name); err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := name + ".opsbot-tmp-" + hex.EncodeToString(rnd[:])
	err := h.withSFTP(ctx, func(sc *sftp.Client) (err error) {
		f, err := sc.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
		if err != nil {
			return fmt.Errorf("create %s: %w", tmp, err)
		}
		defer func() {
			if err != nil {
				f.Close()
				if rerr := sc.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
					err = fmt.Errorf("%w (and removing %s: %v)", err, tmp, rerr)
				}
			}
		}()
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := f.Chmod(perm.Perm()); err != nil {
			return fmt.Errorf("chmod %s: %w", tmp, err)
		}
		if err := f.Sync(); err != nil && !unsupported(err) {
			return fmt.Errorf("sync %s: %w", tmp, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", tmp, err)
		}
		if err := sc.PosixRename(tmp, name); err != nil {
			if !unsupported(err) {
				return fmt.Errorf("rename %s to %s: %w", tmp, name, err)
			}
			if err := sc.Rename(tmp, name); err != nil {
				return fmt.Errorf("rename %s to %s: %w", tmp, name, err)
			}
		}
		return nil
	})
	if err != nil && (ctx.Err() != nil || lostConnection(err)) {
		// Cancelled mid-write or the connection dropped: the client is gone, so remove the
		// temporary file on a fresh one (best effort; after a rename it no longer exists).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		h.withSFTP(rctx, func(sc *sftp.Client) error { return sc.Remove(tmp) })
	}
	if err != nil && ctx.Err() == nil && lostConnection(err) {
		return fmt.Errorf("write %s on %s: %w: %w", name, h.cfg.Name, ErrOutcomeUnknown, err)
	}
	if err != nil {
		return fmt.Errorf("write %s on %s: %w", name, h.cfg.Name, err)
	}
	return nil
}

// lostConnection reports an sftp error that means the connection is gone.
func lostConnection(err error) bool {
	if errors.Is(err, sftp.ErrSSHFxConnectionLost) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var se *sftp.StatusError
	return errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxConnectionLost
}

func unsupported(err error) bool {
	var se *sftp.StatusError
	return errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxOpUnsupported
}
