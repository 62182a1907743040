module github.com/hsbx/hsbx

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/alecthomas/kong v1.17.0
	github.com/gofrs/flock v0.12.1
	github.com/jotaen/kong-completion v0.0.4
	github.com/posener/complete v1.2.3
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.25.0
)

require (
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/riywo/loginshell v0.0.0-20200815045211-7d26008be1ab // indirect
	golang.org/x/tools v0.26.0 // indirect
)
