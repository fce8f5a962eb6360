package lab

import (
	"io"
	"os"
	"path"
	"time"

	"github.com/pkg/sftp"
)

// sftpFS serves a host's file system over sftp, rooted at its root directory. Writes land on
// the same files systemd reads, so a unit written over sftp shows NeedDaemonReload=yes.
type sftpFS struct {
	h    *SimHost
	drop func() // drops the SSH connection (ssh-drop=upload|write)
}

func (h *SimHost) sftpHandlers(drop func()) sftp.Handlers {
	f := &sftpFS{h: h, drop: drop}
	return sftp.Handlers{FileGet: f, FilePut: f, FileCmd: f, FileList: f}
}

// fault runs the ssh-drop fault armed for stage, if any: it reports whether
// the connection was dropped.
func (f *sftpFS) fault(stage string) bool {
	w := f.h.w
	w.lock()
	fire := f.h.lab.faults.takeDrop(stage)
	w.unlock()
	if fire && f.drop != nil {
		f.drop()
	}
	return fire
}

// holdRename waits while a WriteHold is armed for this rename into a unit directory.
func (f *sftpFS) holdRename(target string) {
	if !inUnitDir(target) {
		return
	}
	w := f.h.w
	w.lock()
	h := f.h.lab.faults.takeHold()
	w.unlock()
	if h != nil {
		close(h.reached)
		<-h.release
	}
}

// rename replaces target with the file at p (posix: overwrite), with the
// unit-write faults.
func (f *sftpFS) rename(p, target string, overwrite bool) error {
	f.holdRename(target)
	if !overwrite {
		// SSH_FXP_RENAME must not overwrite (draft-ietf-secsh-filexfer-02).
		if _, serr := os.Lstat(f.real(target)); serr == nil {
			return sftp.ErrSSHFxFailure
		}
	}
	if err := os.Rename(f.real(p), f.real(target)); err != nil {
		return unwrapPath(err)
	}
	if inUnitDir(target) && f.fault("write") {
		return sftp.ErrSSHFxConnectionLost
	}
	return nil
}

func (f *sftpFS) real(p string) string { return f.h.realPath(p) }

func (f *sftpFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	fh, err := os.Open(f.real(r.Filepath))
	if err != nil {
		return nil, unwrapPath(err)
	}
	return fh, nil
}

func (f *sftpFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	return f.OpenFile(r)
}

// OpenFile implements sftp.OpenFileWriter.
func (f *sftpFS) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	fl := r.Pflags()
	flags := 0
	switch {
	case fl.Read && fl.Write:
		flags = os.O_RDWR
	case fl.Write:
		flags = os.O_WRONLY
	default:
		flags = os.O_RDONLY
	}
	if fl.Append {
		flags |= os.O_APPEND
	}
	if fl.Creat {
		flags |= os.O_CREATE
	}
	if fl.Trunc {
		flags |= os.O_TRUNC
	}
	if fl.Excl {
		flags |= os.O_EXCL
	}
	mode := os.FileMode(0o644)
	if a := r.Attributes(); a != nil && r.AttrFlags().Permissions {
		mode = a.FileMode().Perm()
	}
	fh, err := os.OpenFile(f.real(r.Filepath), flags, mode)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if fl.Write && inUnitDir(r.Filepath) && f.fault("upload") {
		fh.Close()
		return nil, sftp.ErrSSHFxConnectionLost
	}
	return fh, nil
}

func (f *sftpFS) Filecmd(r *sftp.Request) error {
	p := f.real(r.Filepath)
	var err error
	switch r.Method {
	case "Setstat":
		if r.AttrFlags().Permissions {
			err = os.Chmod(p, r.Attributes().FileMode().Perm())
		}
		if err == nil && r.AttrFlags().Size {
			err = os.Truncate(p, int64(r.Attributes().Size))
		}
	case "Rename":
		return f.rename(r.Filepath, r.Target, false)
	case "Rmdir":
		err = os.Remove(p)
	case "Remove":
		var st os.FileInfo
		if st, err = os.Lstat(p); err == nil {
			if st.IsDir() {
				return sftp.ErrSSHFxFailure
			}
			err = os.Remove(p)
		}
	case "Mkdir":
		err = os.Mkdir(p, 0o755)
	case "Symlink":
		err = os.Symlink(path.Clean(r.Filepath), f.real(r.Target))
	case "Link":
		err = os.Link(p, f.real(r.Target))
	default:
		return sftp.ErrSSHFxOpUnsupported
	}
	return unwrapPath(err)
}

// PosixRename implements sftp.PosixRenameFileCmder: an atomic replace.
func (f *sftpFS) PosixRename(r *sftp.Request) error {
	return f.rename(r.Filepath, r.Target, true)
}

type listerAt []os.FileInfo

func (l listerAt) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if n+int(off) >= len(l) {
		return n, io.EOF
	}
	return n, nil
}

func (f *sftpFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	p := f.real(r.Filepath)
	switch r.Method {
	case "List":
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, unwrapPath(err)
		}
		var out listerAt
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				out = append(out, fi)
			}
		}
		return out, nil
	case "Stat":
		fi, err := os.Stat(p)
		if err != nil {
			return nil, unwrapPath(err)
		}
		return listerAt{fi}, nil
	case "Readlink":
		t, err := os.Readlink(p)
		if err != nil {
			return nil, unwrapPath(err)
		}
		return listerAt{fakeInfo(t)}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat implements sftp.LstatFileLister.
func (f *sftpFS) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	fi, err := os.Lstat(f.real(r.Filepath))
	if err != nil {
		return nil, unwrapPath(err)
	}
	return listerAt{fi}, nil
}

type fakeInfo string

func (n fakeInfo) Name() string       { return string(n) }
func (n fakeInfo) Size() int64        { return 0 }
func (n fakeInfo) Mode() os.FileMode  { return os.ModeSymlink }
func (n fakeInfo) ModTime() time.Time { return time.Time{} }
func (n fakeInfo) IsDir() bool        { return false }
func (n fakeInfo) Sys() any           { return nil }
