package hostcopy

// noFollow: Windows opens the link itself only on request; the Lstat
// check before the open refuses a link there.
const noFollow = 0
