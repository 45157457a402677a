package httpapi

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/xserve/xserve/api/payload"
)

// shmRegionStatus is one region of Triton's system shared-memory status.
type shmRegionStatus struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   int64  `json:"offset"`
	ByteSize int64  `json:"byte_size"`
}

// shmRegister is the body of a registration.
type shmRegister struct {
	Key      string `json:"key"`
	Offset   int64  `json:"offset"`
	ByteSize int64  `json:"byte_size"`
}

// sharedMemoryRoutes serves Triton's system shared-memory extension from
// s.shm; CUDA shared memory is answered as not supported.
func (s *Server) sharedMemoryRoutes(get, post func(string, fiber.Handler)) {
	const base = "/v2/systemsharedmemory"
	get(base+"/status", s.shmStatus)
	get(base+"/region/:region/status", s.shmStatus)
	post(base+"/region/:region/register", s.shmRegister)
	post(base+"/unregister", s.shmUnregister)
	post(base+"/region/:region/unregister", s.shmUnregister)
}

// regionParam returns the URL's region name ("" on the routes without
// one), unescaped.
func regionParam(c *fiber.Ctx) (string, error) {
	raw := c.Params("region")
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("region name %s in the URL is not validly escaped", quotePath(raw))
	}
	return strings.Clone(name), nil
}

// shmError is a registry error as a 400 naming the region.
func shmError(err error) error {
	return payload.BadRequest("%v", err)
}

func (s *Server) shmStatus(c *fiber.Ctx) error {
	name, err := regionParam(c)
	if err != nil {
		return err
	}
	regions, err := s.shm.Status(name)
	if err != nil {
		return shmError(err)
	}
	out := make([]shmRegionStatus, 0, len(regions))
	for _, r := range regions {
		out = append(out, shmRegionStatus{Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize})
	}
	return s.sendJSON(c, out)
}

func (s *Server) shmRegister(c *fiber.Ctx) error {
	name, err := regionParam(c)
	if err != nil {
		return err
	}
	body, err := s.body(c)
	if err != nil {
		return err
	}
	var r shmRegister
	if err := payload.UnmarshalJSON(body, &r, "the registration of region "+name, true); err != nil {
		return err
	}
	if err := s.shm.Register(name, r.Key, r.Offset, r.ByteSize); err != nil {
		return shmError(err)
	}
	return okEmpty(c)
}

func (s *Server) shmUnregister(c *fiber.Ctx) error {
	name, err := regionParam(c)
	if err != nil {
		return err
	}
	if err := s.shm.Unregister(name); err != nil {
		return shmError(err)
	}
	return okEmpty(c)
}
