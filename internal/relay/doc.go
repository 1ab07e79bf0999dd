// Package relay carries a sandbox's processes and loopback ports over one
// byte stream, the relay's inherited stdin and stdout, so that the host can
// drive a sandbox that has no network to it (MXC's process_container: the
// relay, `corral __relay`, is the sandbox's one process, launched through
// wxc-exec, and the host holds wxc-exec's stdio).
//
// The relay side is [Serve]; the host side is [Open], which returns a
// [Client]: [Client.Start] runs the sandbox's main command (and waits for
// its port), [Client.Exec] and [Client.StartExec] run more processes,
// [Client.DialPort] opens a TCP connection to a loopback port inside.
//
// # Protocol, version 1
//
// Each frame is one JSON object on one line, {"t": TYPE, ...}, at most
// [MaxFrame] bytes with its newline; a longer line, or one that is not a
// JSON object, is a protocol error that ends the channel. Binary payloads
// are base64 (standard, padded) in "data", at most [MaxChunk] bytes decoded.
// Fields absent are zero. Ids are chosen by the host, 1 to 64 bytes; "main"
// names the main command.
//
// The relay speaks first: {"t":"hello","v":1,"pid":N}. A host that does not
// speak version v refuses it (an error naming both versions) and closes the
// channel.
//
// host → relay:
//
//	start  {args, env, dir, wait_port, wait_timeout_ms}  the main command (id "main"), once
//	exec   {id, args, env, dir}                          another process; many may run
//	in     {id, data}                                    bytes for an exec's stdin
//	eof    {id}                                          end of an exec's stdin
//	signal {id, sig}                                     "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", ... (Windows: any is a kill)
//	open   {id, port, nonce}                             connect to 127.0.0.1:port; nonce is 32 lower-case hex digits, fresh per open
//	data   {id, data}                                    bytes for a connection
//	close  {id}                                          close a connection
//	ack    {id, n}                                       n bytes of the relay's out/data for id were consumed
//
// relay → host:
//
//	hello  {v, pid}
//	ready  {id:"main"}              the main command runs (and, with wait_port > 0, 127.0.0.1:wait_port accepts)
//	out    {id, fd, data}           a process's output, fd 1 or 2
//	exit   {id, code, signal, error} a process ended: code is its exit status, or -1 when
//	                                a signal killed it (signal names it) or it never started (error says why);
//	                                the last frame for that id
//	opened {id, nonce}              the connection is up; nonce echoes the open's
//	closed {id, error}              the open failed or was refused; the last frame for that id
//	data   {id, data}
//	close  {id}
//	ack    {id, n}                  n bytes of the host's in/data for id were consumed
//	error  {id, error}              a report: a bad frame (an unknown type is ignored after
//	                                this frame), a start that failed its wait (the main command
//	                                is then killed and its exit follows)
//
// Flow control: each direction of each id has a window of [Window] bytes;
// a sender keeps at most Window bytes of data (decoded) sent and not acked,
// and a receiver acks what it has handed on. A peer that overruns a window
// has broken the protocol; the channel ends. So memory for a chatty
// workload is bounded per stream, and a slow reader slows only its stream.
//
// A connection is closed by a close frame from either side, answered by one
// from the other (each side sends one); data after a side's close is
// dropped. There is no half-close.
//
// An open whose nonce is missing, malformed or already used on this channel
// is refused by the relay (closed with the reason). The host drops a
// connection whose opened echoes a nonce other than the one it minted for
// that id, and ignores any frame for an id it does not know; both are
// recorded ([Client.Faults]) and do not end the channel. An unknown frame
// type ends the channel on the host side.
//
// The relay's stdin and stdout are the channel: the processes it starts get
// pipes of their own (never the relay's stdio), and on Linux [TakeStdio]
// makes the relay non-dumpable, so that a process of its uid cannot reopen
// the channel through /proc or ptrace it (on Windows that is not done yet:
// docs/relay.md, "Security"). When the relay's stdin reaches EOF (the host
// is gone) or the channel breaks, the relay kills every process it started
// (on Unix, each one's process group; on Linux, as their subreaper, what
// they moved to sessions or groups of their own too) and closes every
// connection.
package relay
