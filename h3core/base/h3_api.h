/* h3_api.h - H3_API, the mark of h3core's public functions: those of h3.h
 * and of base/h3_status.h, which h3.h exposes.
 *
 * h3core is compiled with hidden visibility (h3core/meson.build), so every
 * other function is internal to the binary that links it: the tools and
 * tests, which link the static library, still call internals directly,
 * but no binary can export one. H3_API gives the public functions default
 * visibility: they are the symbols a shared h3core would export, and the
 * only ones a binary linking h3core could. The element's plugin exports
 * none of them either: its own map (gst-plugin/gsth3.map) lets out only
 * GStreamer's entry points (docs/ARCHITECTURE.md, the layers). */
#ifndef H3_API_H
#define H3_API_H

#if defined(__GNUC__)
#define H3_API __attribute__((visibility("default")))
#else
#define H3_API
#endif

#endif
