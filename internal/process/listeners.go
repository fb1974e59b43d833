package process

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Socket activation, as systemd does it (sd_listen_fds(3)): the parent binds the sockets and
// passes them from file descriptor 3 on, with their count in LISTEN_FDS and their names in
// LISTEN_FDNAMES (colon-separated). A JobManager whose parent bound its sockets has known,
// taken addresses before it starts, which a Raft group's peers need.
const (
	listenFDs     = "LISTEN_FDS"
	listenFDNames = "LISTEN_FDNAMES"
	listenPID     = "LISTEN_PID"
	firstFD       = 3
)

// Listeners returns the sockets the parent passed (see above), by name, and removes the
// variables from the environment so that they are not passed on. known are the names this
// process uses: a socket of another name, a name given twice or an fd that is not a listening
// socket is an error (and every socket is closed); so is a count that does not match the names
// or exceeds known (and no fd is touched). LISTEN_PID, when set, must be this process's ID
// (systemd sets it; a parent that cannot know the ID before exec, such as Go's os/exec, leaves
// it unset), otherwise the sockets are not ours and none is returned. No LISTEN_FDS: no
// sockets, no error.
func Listeners(known ...string) (map[string]net.Listener, error) {
	count, names, pid := os.Getenv(listenFDs), os.Getenv(listenFDNames), os.Getenv(listenPID)
	for _, k := range []string{listenFDs, listenFDNames, listenPID} {
		os.Unsetenv(k)
	}
	if count == "" || (pid != "" && pid != strconv.Itoa(os.Getpid())) {
		return nil, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%s=%q: want a number of sockets", listenFDs, count)
	}
	var fdNames []string
	if names != "" {
		fdNames = strings.Split(names, ":")
	}
	// Checked before any fd is touched: a wrong count would close descriptors that are not
	// passed sockets but this process's own.
	if len(fdNames) != n {
		return nil, fmt.Errorf("sockets from the parent process: %s=%q names %d sockets, %s=%d", listenFDNames, names, len(fdNames), listenFDs, n)
	}
	if n > len(known) {
		return nil, fmt.Errorf("sockets from the parent process: %s=%d, but this process takes at most %d (%s)", listenFDs, n, len(known), strings.Join(known, ", "))
	}
	out := map[string]net.Listener{}
	var errs []error
	for i := range n {
		fd := firstFD + i
		syscall.CloseOnExec(fd)
		name := ""
		if i < len(fdNames) {
			name = fdNames[i]
		}
		f := os.NewFile(uintptr(fd), name)
		l, err := net.FileListener(f) // a copy: f is closed below either way
		f.Close()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("socket %q (fd %d): %w", name, fd, err))
		case !slices.Contains(known, name):
			l.Close()
			errs = append(errs, fmt.Errorf("socket %q (fd %d): unknown name, want one of %s", name, fd, strings.Join(known, ", ")))
		case out[name] != nil:
			l.Close()
			errs = append(errs, fmt.Errorf("socket %q (fd %d): passed twice", name, fd))
		default:
			out[name] = l
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, l := range out {
			l.Close()
		}
		return nil, fmt.Errorf("sockets from the parent process: %w", err)
	}
	return out, nil
}

// PassListeners is the parent's side: cmd is to receive the listeners by socket activation,
// under their names. It sets cmd.ExtraFiles (which must be empty) to copies of them and adds
// LISTEN_FDS and LISTEN_FDNAMES to cmd.Env (os.Environ() when nil). The returned func closes
// the copies; call it once cmd started. The caller closes its listeners as it would anyway:
// the child's copies stay open.
func PassListeners(cmd *exec.Cmd, ls map[string]net.Listener) (closeCopies func(), err error) {
	if len(cmd.ExtraFiles) > 0 {
		return nil, errors.New("pass listeners: the command has other extra files")
	}
	var files []*os.File
	closeCopies = func() {
		for _, f := range files {
			f.Close()
		}
	}
	names := slices.Sorted(maps.Keys(ls))
	for _, name := range names {
		if name == "" || strings.Contains(name, ":") {
			closeCopies()
			return nil, fmt.Errorf("pass listeners: bad socket name %q", name)
		}
		fl, ok := ls[name].(interface{ File() (*os.File, error) })
		if !ok {
			closeCopies()
			return nil, fmt.Errorf("pass listeners: socket %q (%T) has no file", name, ls[name])
		}
		f, err := fl.File()
		if err != nil {
			closeCopies()
			return nil, fmt.Errorf("pass listeners: socket %q: %w", name, err)
		}
		files = append(files, f)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.ExtraFiles = files
	cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", listenFDs, len(files)), listenFDNames+"="+strings.Join(names, ":"))
	return closeCopies, nil
}
