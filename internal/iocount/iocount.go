// Package iocount counts the bytes that pass through a reader or a writer:
// what the record of what ran and the network log say a command moved.
package iocount

import "io"

// Reader reads from R and counts in N the bytes it gave.
type Reader struct {
	R io.Reader
	N int64
}

func (c *Reader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// Writer writes to W and counts in N the bytes W took.
type Writer struct {
	W io.Writer
	N int64
}

func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
