package nodesim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	msgpackrpc "github.com/hashicorp/net-rpc-msgpackrpc/v2"
	"github.com/hashicorp/nomad/helper/pool"
	"github.com/hashicorp/nomad/nomad/structs"
	"github.com/hashicorp/yamux"
)

// maxIdleStreams is how many idle RPC streams a link keeps for reuse.
const maxIdleStreams = 2

// link is one TCP connection to a server, carrying a yamux session in
// Nomad's multiplex-v2 mode, as the real client's connection pool opens it.
// Client-to-server RPCs use streams the link opens; the server opens
// streams of its own on the session for the RPCs it forwards to the node.
// A link redials (rotating through the servers) when its session breaks.
// Usually a node has a link of its own; with Config.MaxConns several nodes
// share one.
type link struct {
	f *Fleet

	mu     sync.Mutex
	sess   *yamux.Session
	idle   []*clientStream
	next   int // index of the server to dial next
	closed bool
}

type clientStream struct {
	stream *yamux.Stream
	codec  rpc.ClientCodec
}

func newLink(f *Fleet, first int) *link {
	return &link{f: f, next: first}
}

// call makes one RPC to the server.
func (l *link) call(method string, args, reply any) error {
	l.f.stats.rpcs.Add(1)
	cs, sess, err := l.stream()
	if err != nil {
		l.f.stats.rpcErrors.Add(1)
		return err
	}
	if err := msgpackrpc.CallWithCodec(cs.codec, method, args, reply); err != nil {
		l.f.stats.rpcErrors.Add(1)
		cs.stream.Close()
		if isConnError(err) || sess.IsClosed() {
			l.drop(sess)
		}
		return err
	}
	l.put(cs, sess)
	return nil
}

// stream returns an idle stream, or opens one (dialing when needed).
func (l *link) stream() (*clientStream, *yamux.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, errClosed
	}
	if l.sess != nil && l.sess.IsClosed() {
		l.dropLocked(l.sess)
	}
	if n := len(l.idle); n > 0 {
		cs := l.idle[n-1]
		l.idle = l.idle[:n-1]
		return cs, l.sess, nil
	}
	if l.sess == nil {
		sess, err := l.dialLocked()
		if err != nil {
			return nil, nil, err
		}
		l.sess = sess
	}
	st, err := l.sess.OpenStream()
	if err != nil {
		l.dropLocked(l.sess)
		return nil, nil, fmt.Errorf("open stream: %w", err)
	}
	if _, err := st.Write([]byte{byte(pool.RpcNomad)}); err != nil {
		st.Close()
		l.dropLocked(l.sess)
		return nil, nil, fmt.Errorf("open stream: %w", err)
	}
	return &clientStream{stream: st, codec: pool.NewClientCodec(st)}, l.sess, nil
}

// put returns a stream for reuse.
func (l *link) put(cs *clientStream, sess *yamux.Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.sess != sess || len(l.idle) >= maxIdleStreams {
		cs.stream.Close()
		return
	}
	cs.stream.Shrink()
	l.idle = append(l.idle, cs)
}

// dialLocked connects to the next server. l.mu is held; dialing is bounded
// by a short timeout and happens only when the session is gone.
func (l *link) dialLocked() (*yamux.Session, error) {
	servers := l.f.cfg.Servers
	addr := servers[l.next%len(servers)]
	l.next++
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial server %s: %w", addr, err)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetKeepAlive(true)
		_ = tcp.SetNoDelay(true)
	}
	if _, err := conn.Write([]byte{byte(pool.RpcMultiplexV2)}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial server %s: %w", addr, err)
	}
	sess, err := yamux.Client(conn, l.f.yamuxCfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial server %s: yamux: %w", addr, err)
	}
	l.f.stats.dials.Add(1)
	l.f.wg.Add(1)
	go func() {
		defer l.f.wg.Done()
		l.f.acceptStreams(sess)
	}()
	return sess, nil
}

// drop forgets a broken session, so that the next call redials.
func (l *link) drop(sess *yamux.Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(sess)
}

func (l *link) dropLocked(sess *yamux.Session) {
	if l.sess != sess || sess == nil {
		return
	}
	for _, cs := range l.idle {
		cs.stream.Close()
	}
	l.idle = nil
	sess.Close()
	l.sess = nil
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(l.sess)
	l.closed = true
}

var errClosed = errors.New("nodesim: fleet closed")

// isConnError reports whether err means the session is unusable.
func isConnError(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, yamux.ErrStreamClosed) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "session shutdown") || strings.Contains(s, "stream closed") ||
		strings.Contains(s, "connection reset")
}

// acceptStreams serves the streams the server opens on a session: the RPCs
// it forwards to nodes (ClientStats.Stats and the like), as the real
// client's rpcConnListener does. It returns when the session closes.
func (f *Fleet) acceptStreams(sess *yamux.Session) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serveStream(st)
		}()
	}
}

// serveStream handles one server-opened stream: its first byte says
// whether it carries msgpack RPCs or a streaming RPC.
func (f *Fleet) serveStream(st *yamux.Stream) {
	defer st.Close()
	var b [1]byte
	if _, err := io.ReadFull(st, b[:]); err != nil {
		return
	}
	switch pool.RPCType(b[0]) {
	case pool.RpcNomad:
		sc := pool.NewServerCodec(st)
		for {
			if err := f.rpcServer.ServeRequest(sc); err != nil {
				if !isConnError(err) {
					f.logger.Debug("serving forwarded RPC", "error", err)
				}
				return
			}
		}
	case pool.RpcStreaming:
		// Logs, exec and file system streams: nothing runs, so refuse.
		var header structs.StreamingRpcHeader
		if err := codec.NewDecoder(st, structs.MsgpackHandle).Decode(&header); err != nil {
			return
		}
		f.stats.refused.Add(1)
		f.logger.Debug("refusing streaming RPC", "method", header.Method)
		ack := structs.StreamingRpcAck{Error: fmt.Sprintf("nodesim: streaming RPC %s is not supported by simulated nodes", header.Method)}
		_ = codec.NewEncoder(st, structs.MsgpackHandle).Encode(&ack)
	default:
		f.logger.Debug("unrecognized RPC byte on server stream", "byte", b[0])
	}
}

// yamuxConfig is the session config: yamux defaults (keepalives every
// 30s, as the real client has), logging through hclog.
func yamuxConfig(logger hclog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = nil
	cfg.Logger = logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	return cfg
}
