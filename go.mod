module github.com/hsbx/hsbx

go 1.26

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/alecthomas/kong v1.17.0
	github.com/gofrs/flock v0.12.1
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.26.0
	golang.org/x/term v0.25.0
)

require golang.org/x/tools v0.26.0 // indirect
