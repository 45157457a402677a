// Package flagfile fills a flag.FlagSet from a YAML file whose keys are the
// flags' names, so that a server's configuration file and its command line
// describe one set of options.
//
// A key is a flag's name; nested mappings join their keys with "-" (the
// file's `nats: {url: X}` is --nats-url X); a sequence of scalars is the
// flag's comma-separated value. Values go through the flag's own Set, so
// the file accepts exactly what the command line accepts. Flags given on
// the command line win over the file. An unknown key, a value a flag
// refuses, a key given twice, or a value of the wrong kind (a mapping where
// a flag's value belongs) is an error naming the file, the key and its line.
package flagfile
